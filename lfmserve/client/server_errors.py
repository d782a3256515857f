"""A server's error answer -> the exception lfmserve itself raised for it (the tree in lfmserve/errors.py).

lfmserve and llama-server write ``{"error": {"code", "message", "type", "param"?, ...}}``; the Anthropic routes
write ``{"type": "error", "error": {"type", "message"}}``; a proxy such as llama-swap may answer plain text.
The error ``type`` picks the class when it is one lfmserve knows, else the HTTP status does, so each shape
becomes the same exception with the server's own message.
"""

from __future__ import annotations

from typing import Any

from ..errors import (
    AuthenticationFailed,
    ContextLengthExceeded,
    EngineError,
    InvalidRequest,
    LfmError,
    NotFound,
    NotSupported,
    PayloadTooLarge,
    Unavailable,
)

_BY_TYPE: dict[str, type[LfmError]] = {
    "invalid_request_error": InvalidRequest,
    "authentication_error": AuthenticationFailed,
    "permission_error": AuthenticationFailed,
    "not_found_error": NotFound,
    "not_supported_error": NotSupported,
    "unavailable_error": Unavailable,
    "overloaded_error": Unavailable,
    "server_error": EngineError,
    "api_error": EngineError,
}

_BY_STATUS: dict[int, type[LfmError]] = {
    400: InvalidRequest,
    401: AuthenticationFailed,
    403: AuthenticationFailed,
    404: NotFound,
    413: PayloadTooLarge,
    422: InvalidRequest,
    501: NotSupported,
    503: Unavailable,
}


def error_from_body(status: int, body: Any) -> LfmError:
    """The exception for an answer with HTTP ``status`` and ``body`` (parsed JSON, or the text when not JSON)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        text = error if isinstance(error, str) else body if isinstance(body, str) else repr(body)
        return _BY_STATUS.get(status, LfmError)(f"HTTP {status}: {text.strip() or 'no message'}")
    message = str(error.get("message") or f"HTTP {status}")
    kind = str(error.get("type") or "")
    param = error.get("param") if isinstance(error.get("param"), str) else None
    if kind == "exceed_context_size_error":
        return _context_error(error, message)
    if status == 413:
        return PayloadTooLarge(message, param=param)
    cls = _BY_TYPE.get(kind) or _BY_STATUS.get(status) or (EngineError if status >= 500 else InvalidRequest)
    return cls(message, param=param)


def _context_error(error: dict[str, Any], message: str) -> ContextLengthExceeded:
    exc = ContextLengthExceeded(int(error.get("n_prompt_tokens") or 0), int(error.get("n_ctx") or 0))
    exc.message = message  # the server's words, which may differ from this version's
    exc.args = (message,)
    return exc
