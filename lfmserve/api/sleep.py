"""``--sleep-idle-seconds N``: the model unloaded after N seconds without a request that uses it, and loaded
again, transparently, by the next one.

As in llama-server, ``GET`` of /health, /props, /models, /v1/models and /metrics neither use the model nor
wake it: while it sleeps they answer what they answered as it went to sleep (/props then says
``"is_sleeping": true``), recorded by asking those routes twice before unloading: the first answer is
given once, the second from then on (/metrics reports the last throughput once, then rates of 0). Every
other request wakes it (token counting and POST /props included) and waits for the load; the requests
that arrive meanwhile share that one load. The idle time counts from the end of the last request that
used the model, so a long generation is never unloaded under its client.

Example::

    sleeper = Sleeper(state, load, idle_s=300)
    app.add_middleware(sleeper.wrap)  # inside the gate: a request without a valid key wakes nothing
    await sleeper.watch()  # in the lifespan, once the model has loaded
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..chat.serving import Serving
from ..errors import LfmError, Unavailable
from .handlers import error_response
from .state import AppState

logger = logging.getLogger(__name__)

#: The routes that never wake the model (GET only): llama-server's ``create_response(bypass_sleep=true)``.
READ_ONLY_PATHS = ("/health", "/v1/health", "/props", "/models", "/v1/models", "/metrics")
#: The shortest wait between two looks at the idle time, and the wait while requests use the model (llama-server
#: looks once a second).
_POLL_S = 0.1
_BUSY_POLL_S = 1.0


@dataclass(frozen=True, slots=True)
class Recorded:
    """A whole response, as it was sent."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


class Sleeper:
    """Unloads ``state.serving`` after ``idle_s`` seconds unused; ``load`` (the same as at start) brings it back.
    The idle time is read on ``clock`` (a test's own clock, moved by the test, which then calls
    :meth:`settle_idle` rather than waiting)."""

    def __init__(
        self, state: AppState, load: Callable[[], Serving], idle_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.state = state
        self.idle_s = idle_s
        self._clock = clock
        self._load = load
        self._routes: ASGIApp | None = None
        #: While asleep (or waking up): the read-only routes' answers still to give, by path (the last stays).
        self._recorded: dict[str, list[Recorded]] | None = None
        self._in_flight = 0
        self._last_used_s = clock()
        self._transition = asyncio.Lock()  # one unload or load at a time
        self._awake = asyncio.Event()

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """The middleware, for ``add_middleware``: Starlette calls this once, with the routes below it."""
        self._routes = app
        return self._serve

    async def watch(self) -> None:
        """Put the model to sleep each time it has been idle ``idle_s`` seconds (runs for the server's life)."""
        self._last_used_s = self._clock()
        self._awake.set()
        while True:
            await self._awake.wait()
            await asyncio.sleep(await self.settle_idle())

    async def settle_idle(self) -> float:
        """Put the model to sleep if it has been idle ``idle_s`` seconds by the clock; the seconds until it is worth
        looking again (0 once asleep: the watch then waits for the next wake)."""
        if self._in_flight:
            return min(self.idle_s, _BUSY_POLL_S)  # the idle time starts only when they end
        due_s = self._last_used_s + self.idle_s - self._clock()
        if due_s > 0:
            return max(due_s, _POLL_S)
        if self.state.serving is not None and not self._transition.locked():  # not asleep or waking already
            await self._sleep()
        return 0.0

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self._routes is not None
        if scope["type"] != "http":
            await self._routes(scope, receive, send)
        elif scope["method"] == "GET" and scope["path"] in READ_ONLY_PATHS:
            recorded = self._recorded
            if recorded is None:
                await self._routes(scope, receive, send)
            else:
                answers = recorded[scope["path"]]
                await _replay(answers.pop(0) if len(answers) > 1 else answers[0], send)
        else:
            await self._use(scope, receive, send)

    async def _use(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request that may use the model: counted while it runs, after waking the model if it sleeps."""
        assert self._routes is not None
        self._in_flight += 1
        try:
            if self.state.serving is None or self._transition.locked():
                await self._wake()
        except LfmError as error:
            await error_response(error, scope["path"])(scope, receive, send)
            return
        else:
            await self._routes(scope, receive, send)
        finally:
            self._in_flight -= 1
            self._last_used_s = self._clock()

    async def _sleep(self) -> None:
        state = self.state
        async with self._transition:
            state.sleeping = True  # what /props says in the answer recorded now
            recorded = {path: [await self._record(path), await self._record(path)] for path in READ_ONLY_PATHS}
            serving = state.serving
            if self._in_flight or serving is None:  # a request came while recording: it keeps the model
                state.sleeping = False
                return
            self._recorded = recorded
            self._awake.clear()
            state.serving = None
            state.metrics = None  # it holds the engine; /metrics gives the recorded answers now
            await asyncio.to_thread(serving.close)
        logger.info("idle for %g s: model unloaded, sleeping until the next request", self.idle_s)

    async def _wake(self) -> None:
        state = self.state
        async with self._transition:
            if state.serving is not None:  # another request woke it, or the unload gave up
                return
            t0 = time.perf_counter()
            try:
                serving = await asyncio.to_thread(self._load)
            except Exception as exc:  # this request is answered 503; the next one tries again
                logger.error("model failed to load again after sleeping: %s", exc)
                raise Unavailable(f"Model failed to load: {exc}") from exc
            state.install(serving)
            state.sleeping = False
            self._recorded = None
            self._awake.set()
        logger.info("woke up: model loaded again in %.1f s", time.perf_counter() - t0)

    async def _record(self, path: str) -> Recorded:
        """What ``GET path`` answers now, asked of the routes directly (no client, no middleware above)."""
        assert self._routes is not None
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [],
            "client": None,
            "server": None,
            "state": {"app_state": self.state},  # what the lifespan gives every request
        }
        sent: list[Message] = []

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Message) -> None:
            sent.append(message)

        await self._routes(scope, receive, send)
        start = sent[0]
        body = b"".join(message.get("body", b"") for message in sent[1:])
        return Recorded(start["status"], tuple(start.get("headers", ())), body)


async def _replay(recorded: Recorded, send: Send) -> None:
    # a fresh header list: the middleware above adds to it (CORS)
    await send({"type": "http.response.start", "status": recorded.status, "headers": list(recorded.headers)})
    await send({"type": "http.response.body", "body": recorded.body})
