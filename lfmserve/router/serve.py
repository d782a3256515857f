"""``lfmserve`` with neither ``-m`` nor ``-hf``: list the models, start the fork server, and serve the router."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from ..api.server import Server
from ..settings import Settings
from .app import create_router_app
from .catalog import build_catalog
from .events import Events
from .proxy import Proxy
from .spawn import ChildStart, Spawner, drop_secret_variables

logger = logging.getLogger("lfmserve")
#: What the fork server imports once, so that a child starts with all of it in memory: the module whose import
#: imports what every child shares, then freezes it for the garbage collector (see its docstring).
PRELOAD = ("lfmserve.router.preload",)


def serve_router(settings: Settings, child: Callable[[ChildStart], None], sockets: list[socket.socket]) -> int:
    """Serve until SIGTERM / Ctrl-C, drain the proxied requests, then stop every child (0); LfmError when the
    models cannot be listed or started as asked, 1 when the server could not start."""
    drop_secret_variables()  # read into settings already; the fork server and the children start without them
    catalog = build_catalog(settings)
    logger.info("router: %d models", len(catalog))
    for spec in catalog.values():
        aliases = f" (aliases: {', '.join(spec.aliases)})" if spec.aliases else ""
        logger.info("  [%10s] %s%s", spec.source, spec.name, aliases)
    spawner = Spawner(child, PRELOAD, settings.source.hf_token)
    app = create_router_app(settings, catalog, spawner)
    spawner.warm()
    events: Events = app.state.events
    proxy: Proxy = app.state.proxy

    close_tools = app.state.close_tools

    async def drain(timeout_s: float) -> None:
        events.close()  # the model event streams never end by themselves
        if close_tools is not None:
            await asyncio.to_thread(close_tools)  # a tool call in flight ends now
        await proxy.drain(timeout_s)

    # The lifespan's end, after the drain, stops the children: each within its stop timeout.
    return 0 if Server(app, settings.server, drain).serve_on(sockets) else 1
