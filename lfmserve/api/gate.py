"""ASGI middleware in front of every route but OPTIONS (which :mod:`~lfmserve.api.cors` answers first) and the web
UI's files (which :mod:`~lfmserve.api.webui` answers first, public as llama-server's are): 503 while
the model loads or the server shuts down, 401 without a valid API key, 413 for a body over ``--max-body-bytes``
(refused from its Content-Length, or as soon as a chunked body passes the limit, so it is never read whole)."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import AuthenticationFailed, LfmError, PayloadTooLarge, Unavailable
from .handlers import error_response

if TYPE_CHECKING:  # the router uses key_ok without loading the model code that AppState brings
    from .state import AppState

#: Routes that need no API key, read with GET or HEAD only: llama-server's public set (``/health``, ``/v1/health``,
#: and ``/`` with the web UI's other files, which :mod:`~lfmserve.api.webui` answers before this gate), and Ollama's
#: probe of which version a server speaks. None of them tells anything about the models or changes anything.
PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/", "/api/version"})
_READING_METHODS = frozenset({"GET", "HEAD"})


class Gate:
    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            error = self._refusal(scope)
            if error is not None:
                await error_response(error, scope["path"])(scope, receive, send)
                return
            receive = bounded(receive, self.state.settings.server.max_body_bytes)
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> LfmError | None:
        state = self.state
        if state.draining:
            return Unavailable("the server is shutting down")
        if state.serving is None and not state.sleeping:  # asleep, the next middleware wakes it
            if state.load_error is None:
                return Unavailable("Loading model")
            return Unavailable(f"Model failed to load: {state.load_error}")
        return request_refusal(scope, state.api_keys, state.settings.server.max_body_bytes)


def request_refusal(scope: Scope, keys: tuple[bytes, ...], max_body: int) -> LfmError | None:
    """What any lfmserve server (a model's, or the router) refuses before reading a request: a missing or wrong
    API key (reading a public route needs none), or a declared body over ``max_body`` bytes."""
    headers = Headers(scope=scope)
    public = scope["path"] in PUBLIC_PATHS and scope["method"] in _READING_METHODS
    if keys and not public and not key_ok(headers, keys):
        return AuthenticationFailed("Invalid API Key")
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_body:
        return _too_large(max_body)
    return None


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body larger than {limit} bytes (the server's --max-body-bytes)")


def bounded(receive: Receive, limit: int) -> Receive:
    """``receive`` that refuses a body once more than ``limit`` bytes of it have arrived."""
    received = 0

    async def bounded() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise _too_large(limit)
        return message

    return bounded


def key_ok(headers: Headers, keys: tuple[bytes, ...]) -> bool:
    """Bearer token or X-Api-Key, compared in constant time against every configured key."""
    auth = headers.get("authorization", "")
    given = auth[7:].strip() if auth[:7].lower() == "bearer " else headers.get("x-api-key", "")
    candidate = given.encode()
    return any([hmac.compare_digest(candidate, key) for key in keys])
