"""lfmserve: llama-server's HTTP API and an in-process chat API for LFM (and any GGUF) models on CPUs.

Public names only; see README.md for the server and ``lfmserve.chat`` for the in-process API.
"""

from .chat import Chat, Model, TurnStats
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
    Unavailable,
)
from .settings import Settings

__all__ = [
    "AuthenticationFailed",
    "Chat",
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
    "TurnStats",
    "Unavailable",
]
