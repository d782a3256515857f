"""ASGI middleware in front of every route but OPTIONS (which :mod:`~lfmserve.api.cors` answers first) and the web
UI's files (which :mod:`~lfmserve.api.webui` answers first, public as llama-server's are): 503 while
the model loads or the server shuts down, 401 without a valid API key, 413 for a body over ``--max-body-bytes``
(refused from its Content-Length, or as soon as a chunked body passes the limit, so it is never read whole).

The router stands behind the same gate, less the 503s (its models load on demand): it checks the keys once, and
its children accept only the router's own key.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import AuthenticationFailed, LfmError, PayloadTooLarge, Unavailable
from ..settings import ServerSettings
from .handlers import error_response

#: Routes that need no API key, read with GET or HEAD only: llama-server's public set (``/health``, ``/v1/health``,
#: and ``/`` with the web UI's other files, which :mod:`~lfmserve.api.webui` answers before this gate), and Ollama's
#: probe of which version a server speaks. None of them tells anything about the models or changes anything.
PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/", "/api/version"})
_READING_METHODS = frozenset({"GET", "HEAD"})


def always_available() -> None:
    """The router's ``unavailable``: it answers while its models load, each request waiting for its own."""
    return None


class Gate:
    """The refusals before any route, in the API family's error shape: ``unavailable``'s 503 first (a model
    server's :meth:`~lfmserve.api.state.AppState.unavailable`; the router has none), then :func:`request_refusal`'s;
    a body let through is cut off past the limit as it arrives (:func:`bounded`).

    Example::

        app.add_middleware(Gate, server=settings.server, unavailable=state.unavailable)
    """

    def __init__(self, app: ASGIApp, server: ServerSettings, unavailable: Callable[[], Unavailable | None]) -> None:
        self.app = app
        self.keys = tuple(key.encode() for key in server.api_keys)
        self.max_body = server.max_body_bytes
        self.unavailable = unavailable

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            error: LfmError | None = self.unavailable()
            if error is None:
                error = request_refusal(scope, self.keys, self.max_body)
            if error is not None:
                await error_response(error, scope["path"])(scope, receive, send)
                return
            receive = bounded(receive, self.max_body)
        await self.app(scope, receive, send)


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
