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
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import InvalidRequest, LfmError, NotFound
from ..settings import RouterSettings
from .capacity import Capacity
from .catalog import ModelSpec
from .child import Child, ChildFailed
from .events import Events
from .instance import LOADED, LOADING, UNLOADED, Instance
from .spawn import Spawner

logger = logging.getLogger(__name__)
_FAKE_DELAY_S = 2.0


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
    ) -> None:
        self.settings = settings
        self._capacity = Capacity(settings)
        self.instances = {name: Instance(spec) for name, spec in catalog.items()}
        self._names = {alias: name for name, spec in catalog.items() for alias in spec.names}
        self._startup = startup_models(list(self.instances.values()), settings.models_max)
        self._spawner = spawner
        self._events = events
        self._describe = describe
        self._queue: list[Instance] = []
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Future[None]] = []
        #: llama-server's ``LLAMA_SERVER_DEBUG_FAKE_TIMING``: each load and each proxied request takes 2 s longer,
        #: so that its test suite's queue tests see requests overlap.
        self._fake_timing = bool(os.environ.get("LLAMA_SERVER_DEBUG_FAKE_TIMING"))

    # -- names ----------------------------------------------------------------------------------------

    def find(self, name: str) -> Instance | None:
        """The model called ``name`` (or with that alias)."""
        canonical = self._names.get(name)
        return None if canonical is None else self.instances[canonical]

    def get(self, name: str) -> Instance:
        found = self.find(name)
        if found is None:
            raise InvalidRequest(f"model '{name}' not found")
        return found

    async def reload(self, catalog: dict[str, ModelSpec]) -> None:
        """``GET /models?reload=1``: new models are added, changed ones take their new settings, and the running
        models that vanished or changed are stopped. A vanished model is no longer found at once, and forgotten
        once it has no child (so none is left running untracked)."""
        stale = [i for name, i in self.instances.items() if i.running and catalog.get(name) != i.spec]
        for name, instance in list(self.instances.items()):
            if name not in catalog:
                instance.removed = True
                self._forget_if_removed(instance)
        for name, spec in catalog.items():
            if name in self.instances:
                self.instances[name].spec = spec
            else:
                self.instances[name] = Instance(spec)
        self._names = {alias: name for name, spec in catalog.items() for alias in spec.names}
        self._events.publish("*", "models_reload")
        await asyncio.gather(*(self._stop(instance) for instance in stale))

    def _forget_if_removed(self, instance: Instance) -> None:
        if instance.removed and instance.child is None and self.instances.get(instance.name) is instance:
            del self.instances[instance.name]

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
                self._wake.set()
        instance.in_flight += 1
        instance.last_active = time.monotonic()
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
        instance.last_active = time.monotonic()
        self._wake.set()  # a model that became idle may make room for a queued load

    async def _ready(self, instance: Instance, autoload: bool) -> Child:
        attempt = instance.loads - (1 if instance.status == LOADING else 0)
        while True:
            if instance.removed:
                raise InvalidRequest(f"model '{instance.name}' not found")
            if instance.status == LOADED and not instance.stopping and instance.child is not None:
                return instance.child
            if instance.status == UNLOADED and not instance.stopping:
                if instance.loads > attempt:
                    raise LoadFailed(f"model name={instance.name} failed to load: {instance.error}")
                if not autoload:
                    raise InvalidRequest("model is not loaded")
                self._enqueue(instance)
            await instance.changed.wait()

    def _enqueue(self, instance: Instance) -> None:
        if instance not in self._queue:
            self._queue.append(instance)
            self._wake.set()

    # -- management -----------------------------------------------------------------------------------

    def load(self, name: str) -> None:
        """``POST /models/load``: queue the model's load and return (llama-server answers before it is ready)."""
        instance = self.find(name)
        if instance is None:
            raise NotFound("model is not found")
        if instance.running:
            raise InvalidRequest("model is already running")
        problem = self._capacity.too_big(instance)
        if (
            problem is None
            and self._capacity.full(self.instances.values())
            and self._capacity.victim(self.instances.values(), self._queue) is None
            and self._queue == []
        ):
            problem = "model limit reached, try again later"
        if problem is not None:
            raise LfmError(problem)
        instance.wanted = True
        self._enqueue(instance)

    async def unload(self, name: str) -> None:
        """``POST /models/unload``: stop the model (a loading one is killed at once)."""
        instance = self.find(name)
        if instance is None:
            raise InvalidRequest("model is not found")
        if not instance.running:
            raise InvalidRequest("model is not running")
        self._spawn_task(self._stop(instance))

    # -- the scheduler --------------------------------------------------------------------------------

    def start(self) -> None:
        """Run the load queue and the time-to-live watch, and queue the models loaded on startup."""
        for instance in self._startup:
            instance.wanted = True
            self._enqueue(instance)
        self._loops = [asyncio.ensure_future(self._schedule()), asyncio.ensure_future(self._expire())]

    async def close(self) -> None:
        """Stop loading more, then every child (in parallel, each within its stop timeout: each child's follower
        sees it exit), then whatever is left."""
        for loop in self._loops:
            loop.cancel()
        self._queue.clear()
        await asyncio.gather(*(self._stop(i) for i in self.instances.values() if i.child), return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()

    async def _schedule(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                head = self._queue[0]
                if head.running or head.removed or (head.waiting == 0 and not head.wanted):
                    self._queue.pop(0)
                    continue
                problem = self._capacity.too_big(head)
                if problem is not None:
                    self._queue.pop(0)
                    self._set(head, UNLOADED, error=problem, exit_code=1, loads=head.loads + 1)
                    continue
                if not self._capacity.full(self.instances.values(), head):
                    self._queue.pop(0)
                    await self._launch(head)
                    continue
                victim = self._capacity.victim(self.instances.values(), self._queue)
                if victim is None:
                    break  # wait for a request to end or a child to exit
                logger.info("unloading %s (least recently used) to load %s", victim.name, head.name)
                await self._stop(victim)

    async def _launch(self, instance: Instance) -> None:
        if self._fake_timing:
            await asyncio.sleep(_FAKE_DELAY_S)
        instance.wanted = False
        instance.exit_code = instance.error = instance.info = None
        self._set(instance, LOADING, event="model_status", loads=instance.loads + 1)
        try:
            child = await Child.start(self._spawner, instance.name, instance.spec.settings)
        except OSError as exc:
            self._set(instance, UNLOADED, error=f"cannot start its process: {exc}", exit_code=1)
            return
        instance.child = child
        instance.last_used = instance.last_active = time.monotonic()
        self._spawn_task(self._follow(instance, child))
        if instance.removed:  # a reload dropped the model while its child started
            self._spawn_task(self._stop(instance))

    async def _follow(self, instance: Instance, child: Child) -> None:
        """The child's life: ready (or failed), then its exit."""
        try:
            await child.ready
            self._set(instance, LOADED, event=None)  # the waiting requests go now; the event waits for the entry
            info = await self._describe(child)
        except ChildFailed as exc:
            logger.error("model %s failed to load: %s", instance.name, exc.message)
            instance.error = exc.message
        except Exception as exc:  # the child answered nonsense, or died while describing itself
            logger.error("model %s did not describe itself: %s", instance.name, exc)
            child.kill()
        else:
            instance.info = info
            self._events.publish(instance.name, "status_change", {"status": LOADED, "info": info})
        code = await child.exited
        if instance.child is child:
            if code != 0 and not instance.stopping and instance.error is None:
                instance.error = child.failure(code)
                logger.error("model %s stopped: %s", instance.name, instance.error)
            instance.child = None
            instance.stopping = False
            self._set(instance, UNLOADED, exit_code=code, keep_alive_s=None)  # a keep_alive lasts one load
            self._forget_if_removed(instance)

    async def _stop(self, instance: Instance) -> None:
        child = instance.child
        if child is None:
            return
        instance.stopping = True
        self._notify(instance)
        await child.stop(instance.spec.stop_timeout_s)
        while instance.child is child:  # until _follow has seen the exit
            await instance.changed.wait()

    async def _expire(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for instance in self.instances.values():
                if instance.expired(now):
                    logger.info("unloading %s: idle for %.0f s", instance.name, now - instance.last_active)
                    self._spawn_task(self._stop(instance))

    # -- state ----------------------------------------------------------------------------------------

    def _set(
        self,
        instance: Instance,
        status: str,
        *,
        info: dict[str, Any] | None = None,
        event: str | None = "status_change",
        **changes: Any,
    ) -> None:
        """Change the instance, tell the event listeners (llama-server's ``model_status`` when a child is started,
        ``status_change`` after; None: the caller tells them later), and wake its waiters."""
        for key, value in changes.items():
            setattr(instance, key, value)
        instance.status = status
        data: dict[str, Any] = {"status": status}
        if status == UNLOADED:
            data["exit_code"] = instance.exit_code
        if info is not None:
            data["info"] = info
        if event is not None:
            self._events.publish(instance.name, event, data)
        self._notify(instance)

    def _notify(self, instance: Instance) -> None:
        """Wake whoever waits on the instance (each wait takes the event current when it began)."""
        changed, instance.changed = instance.changed, asyncio.Event()
        changed.set()
        self._wake.set()

    def _spawn_task(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
