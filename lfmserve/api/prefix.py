"""``--api-prefix``: every route, ``/health`` and the web UI served under a path prefix, as llama-server
registers its routes under ``api_prefix``.

The middleware takes the prefix off the path and hands the request on, so the routes, the gate's public paths
and a router's forwarding (children are called at their root) see the paths they know. A path outside the prefix
is llama-server's 404. The prefix alone (``/llm``) is redirected to ``/llm/``: the web UI calls the API by URLs
relative to its page, which must end with the slash (llama-server answers 404 there).

Example::

    serve_under(app, settings.server.api_prefix)  # inside CORS, which answers a preflight on any path
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import NotFound
from .handlers import error_response


def serve_under(app: FastAPI, prefix: str) -> None:
    """Serve ``app`` under ``prefix`` (``/llm``, ``llm`` and ``/llm/`` alike); an empty prefix, or ``/``, is the
    root. Added after the routers' middleware and before CORS, which stays outermost."""
    if prefix.strip("/"):
        app.add_middleware(ApiPrefix, prefix="/" + prefix.strip("/"))


class ApiPrefix:
    """ASGI middleware: ``/prefix/rest`` reaches ``app`` as ``/rest``; anything else is answered here."""

    def __init__(self, app: ASGIApp, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path.startswith(self.prefix + "/"):
            rest = path[len(self.prefix) :]
            await self.app({**scope, "path": rest, "raw_path": rest.encode()}, receive, send)
        elif path == self.prefix:
            query = scope.get("query_string", b"").decode("latin-1")
            await RedirectResponse(path + "/" + (f"?{query}" if query else ""))(scope, receive, send)
        else:
            await error_response(NotFound(f"File Not Found: {path}"))(scope, receive, send)
