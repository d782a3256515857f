"""One model of the router as the scheduler sees it: its status, its child, and who is using it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from .catalog import ModelSpec
from .child import Child

UNLOADED, LOADING, LOADED = "unloaded", "loading", "loaded"


@dataclass(eq=False)
class Instance:
    """One model of the router and its child, if one runs."""

    spec: ModelSpec
    status: str = UNLOADED
    child: Child | None = None
    in_flight: int = 0
    waiting: int = 0
    #: When a POST last named it (llama-server's least-recently-used order counts POSTs only).
    last_used: float = 0.0
    #: When a request last ended or began (what the time-to-live counts from).
    last_active: float = 0.0
    loads: int = 0
    exit_code: int | None = None
    #: Why its last load or run failed.
    error: str | None = None
    #: A stop was asked for: no request takes its child any more (see :mod:`.lifecycle`).
    stopping: bool = False
    #: Asked for by ``POST /models/load`` (so it stays queued with no request waiting).
    wanted: bool = False
    #: Gone from the router's sources at a reload: found by no name, listed nowhere; the registry keeps it as
    #: retiring until its child has exited.
    removed: bool = False
    #: The child's own ``/v1/models`` entry, once it is ready.
    info: dict[str, Any] | None = None
    #: How long it stays loaded once idle, as an Ollama request's ``keep_alive`` last said (seconds; negative:
    #: for ever); None: its time-to-live (``--models-ttl``, a preset's ``ttl``).
    keep_alive_s: float | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def failed(self) -> bool:
        """Its last load or run ended in an error (a deliberate stop is no failure, whatever its exit code)."""
        return self.status == UNLOADED and self.error is not None

    @property
    def running(self) -> bool:
        return self.status in (LOADING, LOADED)

    def expired(self, now: float) -> bool:
        """Idle for longer than it is kept: its ``keep_alive``, else its time-to-live (0: no limit)."""
        if not self.idle:
            return False
        keep = self.keep_alive_s
        if keep is None:
            return self.spec.ttl_s > 0 and now - self.last_active >= self.spec.ttl_s
        return keep >= 0 and now - self.last_active >= keep

    def kept_for(self, now: float) -> float:
        """Seconds until it expires if it stays idle (negative: it never does)."""
        keep = self.keep_alive_s if self.keep_alive_s is not None else (self.spec.ttl_s or -1.0)
        return -1.0 if keep < 0 else max(keep - (now - self.last_active), 0.0)

    @property
    def serving(self) -> bool:
        """Its child takes requests now (llama-server's ``is_ready``): not while it loads or stops."""
        return self.status == LOADED and not self.stopping and self.child is not None

    @property
    def idle(self) -> bool:
        return self.status == LOADED and not self.stopping and self.in_flight == 0 and self.waiting == 0
