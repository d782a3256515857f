"""The exception tree: each class's status and type, and the llama-server-shaped body it writes."""

from __future__ import annotations

import pytest

from lfmserve.errors import (
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


@pytest.mark.parametrize(
    ("cls", "status", "error_type"),
    [
        (LfmError, 500, "server_error"),
        (InvalidRequest, 400, "invalid_request_error"),
        (TemplateError, 400, "invalid_request_error"),
        (AuthenticationFailed, 401, "authentication_error"),
        (NotFound, 404, "not_found_error"),
        (NotSupported, 501, "not_supported_error"),
        (Unavailable, 503, "unavailable_error"),
        (RequestCancelled, 500, "server_error"),
        (EngineError, 500, "server_error"),
    ],
)
def test_each_class_has_its_status_and_type(cls: type[LfmError], status: int, error_type: str) -> None:
    error = cls("it broke")
    assert (error.status_code, error.error_type) == (status, error_type)
    assert error.to_body() == {"error": {"code": status, "message": "it broke", "type": error_type}}


def test_a_named_field_is_the_param() -> None:
    body = InvalidRequest("Invalid value for 'top_p'", param="top_p").to_body()
    assert body == {
        "error": {
            "code": 400,
            "message": "Invalid value for 'top_p'",
            "type": "invalid_request_error",
            "param": "top_p",
        }
    }


def test_a_context_overflow_carries_llama_servers_numbers() -> None:
    error = ContextLengthExceeded(5000, 4096)
    assert isinstance(error, InvalidRequest)
    assert error.to_body() == {
        "error": {
            "code": 400,
            "message": "request (5000 tokens) exceeds the available context size (4096 tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 5000,
            "n_ctx": 4096,
        }
    }
