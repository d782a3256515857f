"""The middleware around every lfmserve app's routes, in one order for a model's server and the router alike.

Outermost first: CORS (a preflight is answered before anything, :mod:`~lfmserve.api.cors`), the ``--api-prefix``
(:mod:`~lfmserve.api.prefix`), the catch-all error handler (:mod:`~lfmserve.api.handlers`), the web UI's files
(public, :mod:`~lfmserve.api.webui`), then the gate (:mod:`~lfmserve.api.gate`). Both apps add them here, so a
request is refused, prefixed and answered in the same shape whichever one it reaches.

Example::

    add_edge(app, settings, unavailable=state.unavailable)  # a model's server, after its own middleware
    add_edge(app, settings)                                 # the router: no 503s of its own
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI

from ..errors import Unavailable
from ..settings import Settings
from .cors import Cors
from .gate import Gate, always_available
from .handlers import install_error_handlers
from .prefix import serve_under
from .webui import WebUI, load_assets


def add_edge(
    app: FastAPI, settings: Settings, unavailable: Callable[[], Unavailable | None] = always_available
) -> None:
    """Add the gate (with ``unavailable``'s 503s), the web UI unless ``--no-ui``, the error handlers, the
    ``--api-prefix`` and CORS around the middleware ``app`` has so far."""
    server = settings.server
    app.add_middleware(Gate, server=server, unavailable=unavailable)
    if server.ui:
        app.add_middleware(WebUI, assets=load_assets())
    install_error_handlers(app)
    serve_under(app, server.api_prefix)
    app.add_middleware(Cors, settings=server, origins=settings.agent.allowed_origins(server.cors_origins))
