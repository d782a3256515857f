"""What the handlers share, handed to them through the lifespan state (``request.state.app_state``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from ..chat.serving import Serving
from ..errors import Unavailable
from ..settings import Settings
from .completion_control import LiveCompletions
from .monitoring import MetricsReporter
from .server import settle
from .stream_sessions import StreamSessions


@dataclass(slots=True)
class AppState:
    """``serving`` is None until the model has loaded (the gate answers 503 until then), and while it sleeps."""

    settings: Settings
    #: ``--ui-config``'s object, read once: /props sends it to the web UI as ``ui_settings``.
    ui_settings: dict[str, Any]
    serving: Serving | None = None
    load_error: BaseException | None = None
    metrics: MetricsReporter | None = None
    #: The resumable streams' sessions, whose bounds /metrics reports with the engine's counters.
    streams: StreamSessions = field(default_factory=StreamSessions)
    #: The chat completions being answered, for ``POST /v1/chat/completions/control``.
    completions: LiveCompletions = field(default_factory=LiveCompletions)
    #: Shutting down: new requests are refused while the running ones finish.
    draining: bool = False
    #: The model is unloaded for ``--sleep-idle-seconds`` (:mod:`~lfmserve.api.sleep`), or being unloaded.
    sleeping: bool = False
    #: Run first in a drain: what else a request may be waiting on (the tools' MCP servers).
    on_drain: list[Callable[[], None]] = field(default_factory=list)

    def unavailable(self) -> Unavailable | None:
        """Why no request can be served now (503): shutting down, or the model still loading or failed to load.
        None once it serves, and while it sleeps: the sleeper behind the gate wakes it."""
        if self.draining:
            return Unavailable("the server is shutting down")
        if self.serving is None and not self.sleeping:
            if self.load_error is None:
                return Unavailable("Loading model")
            return Unavailable(f"Model failed to load: {self.load_error}")
        return None

    def install(self, serving: Serving) -> None:
        """Serve ``serving``, loaded at start or on waking up, and report its engine at /metrics."""
        self.metrics = MetricsReporter(serving.engine, self.streams)
        self.serving = serving

    async def drain(self, timeout_s: float) -> None:
        """Refuse new requests, let the running ones finish for up to ``timeout_s``, then end the rest.

        Closing the engine ends each unfinished request with a 503 "the server is shutting down": a stream
        gets it as an error event, a whole answer as its body.
        """
        self.draining = True
        for end in self.on_drain:
            await asyncio.to_thread(end)
        if self.serving is None:
            return
        engine = self.serving.engine
        await settle(lambda: engine.busy, timeout_s)
        await asyncio.to_thread(engine.close)


def app_state(request: Request) -> AppState:
    state: AppState = request.state.app_state
    return state


def serving(request: Request) -> Serving:
    loaded = app_state(request).serving
    assert loaded is not None  # the gate answers 503 until it is set
    return loaded
