"""lfmserve: llama-server's HTTP API and an in-process chat API for LFM (and any GGUF) models on CPUs.

Public names only, loaded on first use: ``import lfmserve.errors`` or ``lfmserve.client`` (the HTTP
client) does not load llama.cpp. See README.md and docs/ for the server, and :mod:`lfmserve.local` for the
in-process API.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import AsyncClient, Client
    from .errors import (
        AuthenticationFailed,
        ContextLengthExceeded,
        EngineError,
        InvalidRequest,
        LfmError,
        NotFound,
        NotSupported,
        RequestCancelled,
        TemplateError,
        TransportError,
        Unavailable,
    )
    from .local import Chat, Model, TurnStats
    from .results import ChatResult, ToolCall
    from .settings import Settings

#: Public name -> the module that defines it.
_EXPORTS = {
    "AsyncClient": "client",
    "AuthenticationFailed": "errors",
    "Chat": "local",
    "ChatResult": "results",
    "Client": "client",
    "ContextLengthExceeded": "errors",
    "EngineError": "errors",
    "InvalidRequest": "errors",
    "LfmError": "errors",
    "Model": "local",
    "NotFound": "errors",
    "NotSupported": "errors",
    "RequestCancelled": "errors",
    "Settings": "settings",
    "TemplateError": "errors",
    "ToolCall": "results",
    "TransportError": "errors",
    "TurnStats": "local",
    "Unavailable": "errors",
}

__all__ = [
    "AsyncClient",
    "AuthenticationFailed",
    "Chat",
    "ChatResult",
    "Client",
    "ContextLengthExceeded",
    "EngineError",
    "InvalidRequest",
    "LfmError",
    "Model",
    "NotFound",
    "NotSupported",
    "RequestCancelled",
    "Settings",
    "TemplateError",
    "ToolCall",
    "TransportError",
    "TurnStats",
    "Unavailable",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'lfmserve' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
