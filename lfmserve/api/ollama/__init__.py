"""Ollama's native API (``/api/...``): its bodies, its model cards, its answers, and its routes."""
