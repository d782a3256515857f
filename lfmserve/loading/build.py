"""What ``lfmserve --version`` prints: lfmserve's version and the llama.cpp build it runs."""

from __future__ import annotations

from importlib.metadata import version

from ..llama.backend import llama_build, system_info


def version_text() -> str:
    """llama-server's ``version:`` line, then the llama.cpp build and what it was compiled to use, as far as
    llama-cpp-python's libraries tell them."""
    return f"version: {version('lfmserve')} (lfmserve)\n{llama_build()}\nsystem info: {system_info()}"
