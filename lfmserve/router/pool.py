"""Which models run, and when their children start and stop: llama-server's router scheduling, with a
time-to-live and a memory budget.

- A request names a model; :meth:`Pool.acquire` returns its child once it serves, loading it first when it is not
  running (autoload). Loads wait in one first-in first-out queue; the requests for one model share its entry, and
  a model whose requests have all left the queue leaves it too.
- A load that would pass ``--models-max`` first stops the least recently used idle model: a loaded one with no
  request running or waiting for it. ``--models-memory-max`` does the same by memory: the running children's
  resident memory plus the new model's files must fit, and a model whose files alone pass it is refused. With
  nothing idle, the load waits at the head of the queue until a request ends.
- A model idle longer than its time-to-live (``--models-ttl``, a preset's ``ttl``) is stopped.
- A child that dies is noticed at once (its exit is watched): the model shows ``unloaded`` with ``failed`` and
  its exit code, and loads again on the next request that names it.

The names are the :class:`~.registry.Registry`'s, each child's start and stop the :class:`~.lifecycle.Lifecycle`'s;
this module decides when they happen. Its two loops (the queue, the time-to-live) never end on an error: a model
whose turn fails is failed, with the reason, and the loop goes on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import InvalidRequest, LfmError, NotFound, Unavailable
from ..settings import RouterSettings
from .capacity import Capacity
from .catalog import ModelSpec
from .child import Child
from .events import Events
from .instance import LOADING, UNLOADED, Instance
from .lifecycle import Lifecycle
from .registry import Registry
from .spawn import Spawner

logger = logging.getLogger(__name__)
_FAKE_DELAY_S = 2.0
#: How often idle models are checked against their time-to-live.
_EXPIRY_PERIOD_S = 1.0


class LoadFailed(LfmError):
    """A model's child stopped before it served: the requests that waited for it get this."""


def startup_models(instances: list[Instance], models_max: int) -> list[Instance]:
    """The models loaded on startup; LfmError when there are more than ``--models-max`` (llama-server refuses to
    start then)."""
    startup = [instance for instance in instances if instance.spec.load_on_startup]
    if models_max and len(startup) > models_max:
        raise LfmError(f"number of models to load on startup ({len(startup)}) exceeds models_max ({models_max})")
    return startup


class Pool:
    def __init__(
        self,
        catalog: dict[str, ModelSpec],
        settings: RouterSettings,
        spawner: Spawner,
        events: Events,
        describe: Callable[[Child], Awaitable[dict[str, Any]]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.registry = Registry(catalog)
        self._capacity = Capacity(settings)
        self._startup = startup_models(list(self.registry.instances.values()), settings.models_max)
        self._events = events
        self._clock = clock
        self._lifecycle = Lifecycle(self.registry, spawner, events, describe, clock)
        self._queue: list[Instance] = []
        self._loops: list[asyncio.Task[None]] = []
        self._closing = False
        #: llama-server's ``LLAMA_SERVER_DEBUG_FAKE_TIMING``: each load and each proxied request takes 2 s longer,
        #: so that its test suite's queue tests see requests overlap.
        self._fake_timing = bool(os.environ.get("LLAMA_SERVER_DEBUG_FAKE_TIMING"))

    async def reload(self, catalog: dict[str, ModelSpec]) -> None:
        """``GET /models?reload=1``: the registry takes the new catalog, the requests waiting for a model that
        vanished are told so, and the running models that vanished or changed are stopped before the answer."""
        replaced = self.registry.replace(catalog)
        self._events.publish("*", "models_reload")
        for instance in replaced.removed:
            self._lifecycle.notify(instance)
        await asyncio.gather(*(self._lifecycle.stop(instance) for instance in replaced.stale))

    # -- requests -------------------------------------------------------------------------------------

    async def acquire(self, instance: Instance, *, autoload: bool, touch: bool) -> Child:
        """The model's child once it serves, counted as busy until :meth:`release`; loads it first (or waits for
        its load) when it is not running. ``touch`` (POST requests) makes it the most recently used."""
        instance.waiting += 1
        try:
            child = await self._ready(instance, autoload)
        finally:
            instance.waiting -= 1
            if instance.waiting == 0 and not instance.wanted and instance in self._queue:
                self._queue.remove(instance)  # everyone waiting left: give the place in the queue back
                self._lifecycle.changed.set()
        # Taken in the same step of the loop as the check that it serves: no expiry or stop comes in between.
        instance.in_flight += 1
        instance.last_active = self._clock()
        if touch:
            instance.last_used = instance.last_active
        if self._fake_timing:  # busy a while longer, counted as busy: the suite's queue tests need the overlap
            try:
                await asyncio.sleep(_FAKE_DELAY_S)
            except BaseException:
                self.release(instance)
                raise
        return child

    def release(self, instance: Instance) -> None:
        instance.in_flight -= 1
        instance.last_active = self._clock()
        self._lifecycle.changed.set()  # a model that became idle may make room for a queued load

    async def _ready(self, instance: Instance, autoload: bool) -> Child:
        attempt = instance.loads - (1 if instance.status == LOADING else 0)
        while True:
            if self._closing:
                raise Unavailable("the router is shutting down")
            if instance.removed:
                raise InvalidRequest(f"model '{instance.name}' not found")
            if instance.serving and instance.child is not None:
                return instance.child
            if instance.status == UNLOADED:
                if instance.loads > attempt:
                    raise _load_error(instance)
                if not autoload:
                    raise InvalidRequest("model is not loaded")
                self._enqueue(instance)
            await instance.changed.wait()

    def _enqueue(self, instance: Instance) -> None:
        if instance not in self._queue:
            self._queue.append(instance)
            self._lifecycle.changed.set()

    # -- management -----------------------------------------------------------------------------------

    def load(self, name: str) -> None:
        """``POST /models/load``: queue the model's load and return (llama-server answers before it is ready); 503
        when every place is taken by a busy model and none is queued to free one."""
        instance = self.registry.find(name)
        if instance is None:
            raise NotFound("model is not found")
        if instance.running:
            raise InvalidRequest("model is already running")
        if instance.spec.problem is not None:
            raise LoadFailed(f"model name={instance.name} failed to load: {instance.spec.problem}")
        problem = self._capacity.too_big(instance)
        if problem is not None:
            raise LfmError(problem)
        instances = self.registry.every_instance()
        if self._capacity.full(instances) and self._capacity.victim(instances, self._queue) is None and not self._queue:
            raise Unavailable("model limit reached, try again later")
        instance.wanted = True
        self._enqueue(instance)

    async def unload(self, name: str) -> None:
        """``POST /models/unload``: stop the model (a loading one is killed at once, one still starting as soon as
        its process exists); answered before it has stopped, as llama-server does."""
        instance = self.registry.find(name)
        if instance is None:
            raise InvalidRequest("model is not found")
        if not instance.running:
            raise InvalidRequest("model is not running")
        self._lifecycle.request_stop(instance)

    # -- the scheduler --------------------------------------------------------------------------------

    def start(self) -> None:
        """Run the load queue and the time-to-live watch, and queue the models loaded on startup."""
        for instance in self._startup:
            instance.wanted = True
            self._enqueue(instance)
        self._loops = [asyncio.create_task(self._schedule()), asyncio.create_task(self._expire())]

    async def close(self) -> None:
        """Stop loading more (a start under way finishes, so its child is known), then stop every child, the retiring
        ones' too (in parallel, each within its stop timeout), then whatever is left."""
        self._closing = True
        self._queue.clear()
        for instance in self.registry.every_instance():
            self._lifecycle.notify(instance)  # the requests waiting for a model give up
        self._lifecycle.changed.set()  # the scheduler sees it is closing (with no model at all, nothing else wakes it)
        self._loops[1].cancel()
        # Both loops are awaited: gather without return_exceptions would end at the cancelled one, while the
        # scheduler may still be starting a child.
        await asyncio.gather(*self._loops, return_exceptions=True)
        await asyncio.gather(*(self._lifecycle.stop(i) for i in self.registry.every_instance() if i.running))
        await self._lifecycle.close()

    async def _schedule(self) -> None:
        wake = self._lifecycle.changed
        while not self._closing:
            await wake.wait()
            wake.clear()
            while self._queue and not self._closing:
                head = self._queue[0]
                try:
                    if not await self._advance(head):
                        break  # wait for a request to end or a child to exit
                except Exception as exc:  # a fault nobody foresaw: the model fails, the queue goes on
                    logger.exception("loading %s failed", head.name)
                    if head in self._queue:
                        self._queue.remove(head)
                    self._lifecycle.fail(head, f"the router could not load it: {exc!r}")

    async def _advance(self, head: Instance) -> bool:
        """One step for the model at the head of the queue: launched, refused, or room made for it; False when
        nothing can be done until a model becomes idle."""
        if head.running or head.removed or (head.waiting == 0 and not head.wanted):
            self._queue.pop(0)
        elif head.spec.problem is not None:  # never started: each request for it gets the reason
            self._queue.pop(0)
            self._lifecycle.refuse(head, head.spec.problem)
        elif (problem := self._capacity.too_big(head)) is not None:
            self._queue.pop(0)
            self._lifecycle.refuse(head, problem)
        elif not self._capacity.full(self.registry.every_instance(), head):
            self._queue.pop(0)
            if self._fake_timing:
                await asyncio.sleep(_FAKE_DELAY_S)
                if head.removed:  # a reload dropped it meanwhile: started now, its child would belong to nobody
                    return True
            await self._lifecycle.launch(head)
        elif (victim := self._capacity.victim(self.registry.every_instance(), self._queue)) is not None:
            logger.info("unloading %s (least recently used) to load %s", victim.name, head.name)
            await self._lifecycle.stop(victim)
        else:
            return False
        return True

    async def _expire(self) -> None:
        while True:
            await asyncio.sleep(_EXPIRY_PERIOD_S)
            self.expire_idle()

    def expire_idle(self) -> None:
        """Stop the models idle for longer than they are kept. The stop begins in this step of the loop, so a
        request that comes after it waits for the model to load again rather than take a child that is stopping."""
        now = self._clock()
        for instance in list(self.registry.instances.values()):
            if instance.expired(now):
                logger.info("unloading %s: idle for %.0f s", instance.name, now - instance.last_active)
                self._lifecycle.request_stop(instance)


def _load_error(instance: Instance) -> LfmError:
    """What the requests that waited for a load that ended without serving get."""
    if instance.error is None:
        return Unavailable(f"model '{instance.name}' was unloaded while it was loading")
    return LoadFailed(f"model name={instance.name} failed to load: {instance.error}")
