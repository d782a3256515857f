"""CORS as llama-server answers it: ``Access-Control-Allow-Origin`` on every response, and every ``OPTIONS``
request answered at once (200, empty, with ``--cors-methods``, ``--cors-headers`` and whether
``--cors-credentials``), before the loading check and the API key, since a browser's preflight carries no key.

``--cors-origins`` chooses the origin allowed:

- ``*`` (the default): the request's ``Origin``, echoed back while credentials are allowed (the default), since
  ``*`` cannot be used with them; ``*`` itself with ``--no-cors-credentials``;
- ``localhost``: the ``Origin`` only when its host is localhost, 127.0.0.1 or [::1] (any port), so only local
  pages can call the server;
- a comma-separated list of origins: the ``Origin`` when it is on the list. llama-server sends the list itself,
  which a browser accepts only when it is one origin; for one origin that is the same answer where it matters.
  An entry with ``*`` is a pattern (``http://localhost:*``, ``chrome-extension://*``) and ``*`` among others allows
  any origin, as Ollama's CORS reads ``OLLAMA_ORIGINS`` (which sets this list, :mod:`lfmserve.settings.ollama_env`).

Starlette's CORSMiddleware cannot say this: it refuses a preflight from an origin not allowed with a 400,
where llama-server answers 200 without the header, and it answers only preflights that name a method.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..settings import ServerSettings

_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


class Cors:
    """ASGI middleware, outermost, so that errors (401, 503) carry the header too."""

    def __init__(self, app: ASGIApp, settings: ServerSettings, origins: str) -> None:
        """``origins``: ``--cors-origins``, or what stands for it (localhost only with tools on)."""
        self.app = app
        self.origins = origins.strip()
        self.listed = frozenset(o.strip() for o in origins.split(",") if o.strip())
        self.any_origin = "*" in self.listed
        # each * matches any run of characters, the rest itself
        self.patterns = [re.compile(".*".join(map(re.escape, o.split("*")))) for o in self.listed if "*" in o]
        self.credentials = settings.cors_credentials
        # as llama-server writes them: "false" too, which a browser reads as no
        self.preflight = [
            (b"Access-Control-Allow-Credentials", b"true" if settings.cors_credentials else b"false"),
            (b"Access-Control-Allow-Methods", settings.cors_methods.encode("latin-1")),
            (b"Access-Control-Allow-Headers", settings.cors_headers.encode("latin-1")),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        allowed = self.allowed_origin(Headers(scope=scope).get("origin", ""))
        if scope["method"] == "OPTIONS":
            preflight = Response(b"", media_type="text/html")
            preflight.raw_headers += _allow(allowed) + self.preflight
            await preflight(scope, receive, send)
            return
        if allowed is None:
            await self.app(scope, receive, send)
            return

        async def send_with_origin(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *_allow(allowed)]
            await send(message)

        await self.app(scope, receive, send_with_origin)

    def allowed_origin(self, origin: str) -> str | None:
        """The ``Access-Control-Allow-Origin`` value for a request from ``origin`` (None: send none)."""
        if self.any_origin and not self.credentials:
            return "*"  # llama-server's answer, with or without an Origin
        if not origin:
            return None
        if self.any_origin:
            return origin
        if self.origins == "localhost":
            return origin if _is_local(origin) else None
        listed = origin in self.listed or any(pattern.fullmatch(origin) for pattern in self.patterns)
        return origin if listed else None


def _allow(origin: str | None) -> list[tuple[bytes, bytes]]:
    """The headers that allow ``origin``; named in llama-server's case, since clients that copy the headers
    into a plain dict look them up so (Starlette's ``Headers`` would lower-case them)."""
    if origin is None:
        return []
    allow = [(b"Access-Control-Allow-Origin", origin.encode("latin-1"))]
    # an echoed Origin makes the answer depend on the request's: a cache must keep the answers apart
    return allow if origin == "*" else [*allow, (b"Vary", b"Origin")]


def _is_local(origin: str) -> bool:
    try:
        return urlsplit(origin).hostname in _LOCAL_HOSTS
    except ValueError:  # not a URL (an unclosed "[")
        return False
