"""The HTTP server of a single model and of the router: uvicorn on sockets bound before anything loads, stopped by
SIGTERM or Ctrl-C through a drain.

Both servers stop the same way: no new connections, then the app's drain (new requests on open connections get a
503, the running ones have ``--shutdown-timeout`` seconds to finish, what still runs then ends with a 503 in its
API's shape, a stream with its error event), then uvicorn's own shutdown writes the ends of those answers and runs
the lifespan's (a router stops its children there). What a drain ends is the app's own:
:meth:`~lfmserve.api.state.AppState.drain` closes the engine, a router's proxy cuts its children's answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time
from collections.abc import Awaitable, Callable

import uvicorn
from starlette.types import ASGIApp

from ..settings import ServerSettings
from .sockets import tls_files

#: Refuse new requests, give the running ones the seconds given, then end the rest.
Drain = Callable[[float], Awaitable[None]]
#: uvicorn's ``on_tick`` counts tenths of a second; it refreshes the ``Date`` header when the count is a multiple of 10.
_TICKS_PER_SECOND = 10
#: How often :meth:`Server.main_loop` runs uvicorn's tick when nothing asks it to exit.
_TICK_S = 1.0
#: After the drain only the ends of answers remain to be written; a client that does not read them is cut then.
_WRITE_ENDS_S = 5


class Server(uvicorn.Server):
    """uvicorn, draining the app before its own shutdown: uvicorn alone would cancel the running requests after its
    timeout, each with a traceback and no answer, so a stream would end cut, with no error event."""

    def __init__(self, app: ASGIApp, settings: ServerSettings, drain: Drain) -> None:
        tls = tls_files(settings)
        config = uvicorn.Config(
            app,
            # h11 writes header names as given (httptools lower-cases them): clients that copy the headers into a
            # plain dict, as llama.cpp's test suite does, find llama-server's "Access-Control-Allow-Origin". It
            # costs about 5 us more per streamed event (measured: 8 against 3 us of the loop's time); through a
            # router, the decode ratio to the model served alone was the same as with httptools (0.99 and 0.98).
            http="h11",
            ws="none",  # llama-server's API has no websockets; "auto" would import the websockets package
            log_config=None,  # its lines go through lfmserve's handlers: --log-file, --log-jsonl and the rest
            log_level="info" if settings.verbose else "warning",
            access_log=settings.verbose,
            timeout_graceful_shutdown=_WRITE_ENDS_S,
            ssl_certfile=tls[0],
            ssl_keyfile=tls[1],
        )
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        super().__init__(config)
        self._drain = drain
        self._shutdown_timeout_s = settings.shutdown_timeout

    @property
    def should_exit(self) -> bool:
        return self._exit_asked

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        """Asked to exit (a signal, a failed load, from any thread): :meth:`main_loop` wakes now."""
        self._exit_asked = value
        if value and self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def main_loop(self) -> None:
        """uvicorn's loop, woken once a second (to refresh its ``Date`` header) or when asked to exit. uvicorn's own
        wakes ten times a second to look at ``should_exit``, which a server that serves nothing, or sleeps, pays."""
        self._wake, self._loop = asyncio.Event(), asyncio.get_running_loop()
        ticks = 0
        while not await self.on_tick(ticks):
            ticks = (ticks + _TICKS_PER_SECOND) % (_TICKS_PER_SECOND * 86_400)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), _TICK_S)

    def serve_on(self, sockets: list[socket.socket]) -> bool:
        """Serve on ``sockets`` until SIGTERM / Ctrl-C and the drain; False when the server could not start."""
        # uvicorn raises the signal it stopped for again once it is done, with the handlers it found: with these,
        # that second delivery finds the shutdown already done and the process exits with its caller's code.
        for stop_signal in (signal.SIGINT, signal.SIGTERM):
            signal.signal(stop_signal, lambda *_: None)
        self.run(sockets=sockets)
        return self.started

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # no new connections while draining
        await self._drain(self._shutdown_timeout_s)
        await super().shutdown(sockets)


async def settle(busy: Callable[[], bool], timeout_s: float) -> None:
    """Wait until ``busy()`` is false, or ``timeout_s`` has passed: the running requests' grace in a drain."""
    deadline = time.monotonic() + timeout_s
    while busy() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
