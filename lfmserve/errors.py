"""The single exception tree of lfmserve, and its llama-server-shaped JSON body.

```
LfmError                        500 server_error
|- InvalidRequest(param=)       400 invalid_request_error
|  |- ContextLengthExceeded     400 exceed_context_size_error (+ n_prompt_tokens, n_ctx)
|  |- TemplateError             400 invalid_request_error
|  '- PayloadTooLarge           413 invalid_request_error (a body over --max-body-bytes)
|- AuthenticationFailed         401 authentication_error
|- NotFound                     404 not_found_error
|- NotSupported                 501 not_supported_error
|- Unavailable                  503 unavailable_error (model loading, queue full, shutting down)
|- RequestCancelled             the caller has gone; nothing is sent
|- EngineError                  500 server_error (llama_decode return codes, load failures)
'- TransportError               raised by lfmserve.client only: no HTTP answer (refused, reset, timed out)
```

Each class carries its HTTP status and error type, so the server needs one handler for all of them.
"""

from __future__ import annotations

from typing import Any, ClassVar


class LfmError(Exception):
    """Base of every error lfmserve raises on purpose."""

    status_code: ClassVar[int] = 500
    error_type: ClassVar[str] = "server_error"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def extra_fields(self) -> dict[str, Any]:
        """Fields added beside code/message/type (llama-server adds numbers to some errors)."""
        return {}

    def to_body(self) -> dict[str, Any]:
        """``{"error": {"code", "message", "type", ...}}`` as llama-server writes it."""
        error: dict[str, Any] = {"code": self.status_code, "message": self.message, "type": self.error_type}
        if self.param is not None:
            error["param"] = self.param
        error.update(self.extra_fields())
        return {"error": error}


class InvalidRequest(LfmError):
    status_code = 400
    error_type = "invalid_request_error"


class ContextLengthExceeded(InvalidRequest):
    error_type = "exceed_context_size_error"

    def __init__(self, n_prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(
            f"request ({n_prompt_tokens} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"
        )
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx

    def extra_fields(self) -> dict[str, Any]:
        return {"n_prompt_tokens": self.n_prompt_tokens, "n_ctx": self.n_ctx}


class TemplateError(InvalidRequest):
    """The chat template raised or could not be rendered for these messages."""


class PayloadTooLarge(InvalidRequest):
    """A request body over ``--max-body-bytes``: refused before it is read whole."""

    status_code = 413


class AuthenticationFailed(LfmError):
    status_code = 401
    error_type = "authentication_error"


class NotFound(LfmError):
    status_code = 404
    error_type = "not_found_error"


class NotSupported(LfmError):
    status_code = 501
    error_type = "not_supported_error"


class Unavailable(LfmError):
    status_code = 503
    error_type = "unavailable_error"


class RequestCancelled(LfmError):
    """The request was cancelled because its caller has gone: there is nobody to answer."""


class EngineError(LfmError):
    """llama.cpp failed: a load, a decode or an allocation."""


class TransportError(LfmError):
    """lfmserve.client got no HTTP answer at all (connection refused or reset, timed out): not the server's verdict."""
