"""The HTTP API: the app, its middleware and error handlers, SSE framing, and one router per API family.

Each family (``openai``, ``native`` for llama-server's own routes) has its protocol models, the
response shapes, and a router whose handlers parse the body, adapt it for the chat layer and choose
JSON or SSE. Nothing outside this package imports it (the CLI builds the app).
"""
