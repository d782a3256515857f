"""ASGI middleware in front of every route: 503 while the model loads, 401 without a valid API key."""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import AuthenticationFailed, LfmError, Unavailable
from .handlers import error_response
from .state import AppState

#: Routes that need no API key (llama-server's public endpoints).
PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/models", "/v1/models"})


class Gate:
    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            error = self._refusal(scope)
            if error is not None:
                await error_response(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> LfmError | None:
        state = self.state
        if state.serving is None:
            if state.load_error is None:
                return Unavailable("Loading model")
            return Unavailable(f"Model failed to load: {state.load_error}")
        if state.api_keys and scope["path"] not in PUBLIC_PATHS and scope["method"] != "OPTIONS":
            if not key_ok(Headers(scope=scope), state.api_keys):
                return AuthenticationFailed("Invalid API Key")
        return None


def key_ok(headers: Headers, keys: tuple[bytes, ...]) -> bool:
    """Bearer token or X-Api-Key, compared in constant time against every configured key."""
    auth = headers.get("authorization", "")
    given = auth[7:].strip() if auth[:7].lower() == "bearer " else headers.get("x-api-key", "")
    candidate = given.encode()
    return any([hmac.compare_digest(candidate, key) for key in keys])
