"""``lfmserve`` with neither ``-m`` nor ``-hf``: list the models, start the fork server, and serve the router."""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import Callable

import uvicorn

from ..settings import Settings
from .app import create_router_app
from .catalog import build_catalog
from .events import Events
from .spawn import ChildStart, Spawner, drop_secret_variables

logger = logging.getLogger("lfmserve")
#: What the fork server imports once, so that a child starts with all of it in memory.
PRELOAD = (
    "lfmserve.cli",
    "lfmserve.api.app",
    "lfmserve.loading.loader",
    # what uvicorn imports only when a server starts
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.lifespan.on",
    "uvicorn.loops.auto",
    "uvicorn.loops.uvloop",
)


class _RouterServer(uvicorn.Server):
    """uvicorn, ending the ``/models/sse`` streams as it starts shutting down (it waits for open answers to end)."""

    def __init__(self, config: uvicorn.Config, events: Events) -> None:
        super().__init__(config)
        self._events = events

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._events.close()
        await super().shutdown(sockets)


def serve_router(settings: Settings, child: Callable[[ChildStart], None], sockets: list[socket.socket]) -> int:
    """Serve until SIGTERM / Ctrl-C, then stop every child (0); LfmError when the models cannot be listed or
    started as asked, 1 when the server could not start."""
    drop_secret_variables()  # read into settings already; the fork server and the children start without them
    catalog = build_catalog(settings)
    logger.info("router: %d models", len(catalog))
    for spec in catalog.values():
        aliases = f" (aliases: {', '.join(spec.aliases)})" if spec.aliases else ""
        logger.info("  [%10s] %s%s", spec.source, spec.name, aliases)
    spawner = Spawner(child, PRELOAD, settings.source.hf_token)
    app = create_router_app(settings, catalog, spawner)
    spawner.warm()
    config = uvicorn.Config(
        app,
        # h11, as a single model's server: header names go out as written, which clients that copy headers into a
        # plain dict (llama.cpp's test suite) need. Measured against httptools on streams through the router, the
        # decode ratio to the model served alone was the same within the machine's noise (0.99 and 0.98).
        http="h11",
        log_level="info" if settings.server.verbose else "warning",
        access_log=settings.server.verbose,
        timeout_graceful_shutdown=5,
    )
    server = _RouterServer(config, app.state.events)
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, lambda *_: None)
    server.run(sockets=sockets)
    return 0 if server.started else 1
