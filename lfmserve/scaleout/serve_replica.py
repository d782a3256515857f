"""One lfmserve engine behind a Ray Serve replica: the unchanged app, run in-process, and what Serve asks of it.

Serve asks a replica three things besides requests: whether it is healthy (``check_health``), how loaded
it is (``record_routing_stats``, read by the request router), and, at start, to be ready before it is
routed to. The app loads its model in its lifespan, in a thread, answering 503 ``Loading model`` until
then; :meth:`EngineReplica.start` waits for that load, so Serve never sends a request to a replica that
would refuse it, and a model that fails to load fails the replica's start with its reason. No Ray here:
:mod:`~lfmserve.scaleout.serve_app` wraps this class in a deployment.

Example::

    replica = EngineReplica(settings, name="r1")
    await replica.start()                   # returns once the model is loaded
    replica.load()                          # ReplicaLoad(n_busy_slots=0, n_waiting=0, n_slots=4)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..api.app import create_app
from ..api.state import AppState
from ..errors import LfmError, Unavailable
from ..loading.files import resolve_model_files
from ..loading.loader import load_serving
from ..settings import Settings
from .serve_asgi import HttpRequest, HttpResponse, InProcessApp, ResponsePart

#: The response header naming the replica that answered (lets a client or a test see where it landed).
REPLICA_HEADER = b"x-lfmserve-replica"


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """A replica's engine at one moment: running generations, requests waiting for a slot, and its slots."""

    n_busy_slots: int
    n_waiting: int
    n_slots: int

    @property
    def n_requests(self) -> int:
        return self.n_busy_slots + self.n_waiting


class EngineReplica:
    """The lfmserve app for ``settings`` (model files resolved here, on the replica's node), named ``name``."""

    def __init__(self, settings: Settings, *, name: str) -> None:
        self.name = name
        files = resolve_model_files(settings)
        app = create_app(settings, lambda: load_serving(settings, files))
        self._state: AppState = app.state.app_state
        self._app = InProcessApp(app, headers=((REPLICA_HEADER, name.encode()),))

    async def start(self, poll_s: float = 0.05) -> None:
        """Start the app and wait until its model is loaded; raises the load's error if it fails."""
        await self._app.start()
        while self._state.serving is None:
            if self._state.load_error is not None:
                raise LfmError(f"Model failed to load: {self._state.load_error}") from self._state.load_error
            await asyncio.sleep(poll_s)

    async def stop(self) -> None:
        """End the running requests (each gets a 503) and close the engine."""
        await self._state.drain(0.0)
        await self._app.stop()

    def stream(self, request: HttpRequest) -> AsyncIterator[ResponsePart]:
        return self._app.stream(request)

    async def respond(self, request: HttpRequest) -> HttpResponse:
        return await self._app.respond(request)

    def check_health(self) -> None:
        """Raises while the replica cannot answer: model not loaded (or failed), or shutting down. Asleep
        (``--sleep-idle-seconds``) is healthy: the next request wakes it."""
        state = self._state
        if state.load_error is not None:
            raise Unavailable(f"Model failed to load: {state.load_error}")
        if state.draining:
            raise Unavailable("the server is shutting down")
        if state.serving is None and not state.sleeping:
            raise Unavailable("Loading model")

    def load(self) -> ReplicaLoad:
        """The engine's slots and queue now (all zero while asleep)."""
        serving = self._state.serving
        if serving is None:
            return ReplicaLoad(0, 0, self._state.settings.engine.parallel)
        engine = serving.engine
        return ReplicaLoad(sum(slot.busy for slot in engine.slots), engine.n_waiting, engine.n_slots)
