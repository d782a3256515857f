"""One model's child from its start to its exit: the transitions of an :class:`~.instance.Instance`, each made on
the event loop, and the tasks that wait on a child, each supervised.

::

    UNLOADED --launch--> LOADING --ready--> LOADED
       ^                    |                  |
       +------ exit --------+------ exit ------+

A stop may be asked for at any time while the model runs. It marks the model ``stopping`` at once, so no request
takes its child from that moment; the child is asked to exit (killed if it still loads), or, when it is still being
started, as soon as it exists. A deliberate stop is not a failure: the model shows ``failed`` only when its child
could not start, stopped before it was ready, or died. A task that waits on a child and fails (a bug, or a fault
nobody foresaw) is logged with its traceback and fails its model, so nothing stays ``loading`` for ever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .child import Child, ChildFailed
from .events import Events
from .instance import LOADED, LOADING, UNLOADED, Instance
from .registry import Registry
from .spawn import Spawner

logger = logging.getLogger(__name__)


class Lifecycle:
    def __init__(
        self,
        registry: Registry,
        spawner: Spawner,
        events: Events,
        describe: Callable[[Child], Awaitable[dict[str, Any]]],
        clock: Callable[[], float],
    ) -> None:
        self._registry = registry
        self._spawner = spawner
        self._events = events
        self._describe = describe
        self._clock = clock
        #: Set at every transition: the scheduler looks at its queue again.
        self.changed = asyncio.Event()
        self._tasks: set[asyncio.Future[Any]] = set()

    async def launch(self, instance: Instance) -> None:
        """Start the model's child (LOADING); the follower then sees it ready and exit."""
        instance.wanted = False
        instance.exit_code = instance.error = instance.info = None
        self.set(instance, LOADING, event="model_status", loads=instance.loads + 1)
        try:
            child = await Child.start(self._spawner, instance.name, instance.spec.settings)
        except Exception as exc:  # OSError; EOFError when the fork server died while forking it
            logger.error("model %s: cannot start its process: %r", instance.name, exc)
            self.set(instance, UNLOADED, error=f"cannot start its process: {exc!r}", exit_code=1, stopping=False)
            return
        instance.child = child
        instance.last_used = instance.last_active = self._clock()
        self.supervise(self._follow(instance, child), instance)
        if instance.stopping or instance.removed:  # asked to stop, or dropped by a reload, while it started
            self.request_stop(instance)

    def refuse(self, instance: Instance, reason: str) -> None:
        """A load that cannot be tried (the model is too big for the memory budget): it fails at once."""
        self.set(instance, UNLOADED, error=reason, exit_code=1, loads=instance.loads + 1)

    def request_stop(self, instance: Instance) -> None:
        """Stop the model: no request takes its child from now on; the child is asked to exit now, or as soon as it
        exists when it is still being started."""
        if not instance.running:
            return
        if not instance.stopping:
            instance.stopping = True
            self.notify(instance)
        if instance.child is not None:
            self.supervise(instance.child.stop(instance.spec.stop_timeout_s), instance)

    async def stop(self, instance: Instance) -> None:
        """Stop the model and wait until it is unloaded."""
        self.request_stop(instance)
        while instance.running:
            await instance.changed.wait()

    def fail(self, instance: Instance, reason: str) -> None:
        """The model failed for ``reason``: its child (if any) is killed, and it shows unloaded and failed."""
        instance.error = reason
        child = instance.child
        if child is not None:
            child.kill()
            child.exited.add_done_callback(lambda exited: self._seen_exit(instance, child, exited))
        elif instance.running:
            self.set(instance, UNLOADED, exit_code=1, stopping=False)

    async def _follow(self, instance: Instance, child: Child) -> None:
        """The child's life: ready (or failed), then its exit."""
        try:
            await child.ready
            self.set(instance, LOADED, event=None)  # the waiting requests go now; the event waits for the entry
            info = await self._describe(child)
        except ChildFailed as exc:
            if not instance.stopping:
                logger.error("model %s failed to load: %s", instance.name, exc.message)
                instance.error = exc.message
        except Exception as exc:  # the child answered nonsense, or died while describing itself
            if not instance.stopping:
                logger.error("model %s did not describe itself: %r", instance.name, exc)
                instance.error = f"it did not describe itself: {exc!r}"
            child.kill()
        else:
            instance.info = info
            self._events.publish(instance.name, "status_change", {"status": LOADED, "info": info})
        self._unloaded(instance, child, await child.exited)

    def _seen_exit(self, instance: Instance, child: Child, exited: asyncio.Future[int]) -> None:
        """The exit watch of a child that was killed ended: its model is unloaded, unless the watch was cancelled
        (the router is closing: the child is killed already and stays the model's, so nothing loses track of it)."""
        if not exited.cancelled():
            self._unloaded(instance, child, exited.result())

    def _unloaded(self, instance: Instance, child: Child, code: int) -> None:
        """The child exited with ``code``: the model is unloaded (once, by whoever sees the exit first)."""
        if instance.child is not child:
            return
        if code != 0 and not instance.stopping and instance.error is None:
            instance.error = child.failure(code)
            logger.error("model %s stopped: %s", instance.name, instance.error)
        instance.child = None
        self.set(instance, UNLOADED, exit_code=code, keep_alive_s=None, stopping=False)  # keep_alive: one load

    def set(self, instance: Instance, status: str, *, event: str | None = "status_change", **changes: Any) -> None:
        """Change the instance, tell the event listeners (llama-server's ``model_status`` when a child is started,
        ``status_change`` after; None: the caller tells them later), and wake its waiters."""
        for key, value in changes.items():
            setattr(instance, key, value)
        instance.status = status
        if status == UNLOADED:  # however it stopped (an exit, a start that failed): a retiring model is done
            self._registry.forget_retired(instance)
        if event is not None:
            data: dict[str, Any] = {"status": status}
            if status == UNLOADED:
                data["exit_code"] = instance.exit_code
            self._events.publish(instance.name, event, data)
        self.notify(instance)

    def notify(self, instance: Instance) -> None:
        """Wake whoever waits on the instance (each wait takes the event current when it began), and the
        scheduler."""
        changed, instance.changed = instance.changed, asyncio.Event()
        changed.set()
        self.changed.set()

    def supervise(self, work: Awaitable[Any], instance: Instance | None = None) -> None:
        """Run ``work`` as a task that is kept until it ends; if it fails, log why and fail ``instance``."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)

        def done(task: asyncio.Future[Any]) -> None:
            self._tasks.discard(task)
            if task.cancelled() or task.exception() is None:
                return
            error = task.exception()
            logger.error("a task of the router failed", exc_info=error)
            if instance is not None:
                self.fail(instance, f"the router lost track of it: {error!r}")

        task.add_done_callback(done)

    async def close(self) -> None:
        """Cancel the tasks still running (every child has exited by now)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
