"""Children that are no processes: a spawner whose "children" live in the test, so that the router's logic (the
registry, the pool, the lifecycle and the real :class:`~lfmserve.router.child.Child`) runs in-process, in
milliseconds, with no fork server.

A :class:`FakeProcess` speaks the child's end of the control line as :mod:`lfmserve.router.link` does (it reports
``ready``) and reads the router's ``exit`` from it. It exits only when the test says so, as a real process exits a
while after it is asked to or killed; its exit shows on its ``sentinel`` (a pipe), which the router watches as it
watches a real process's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any, cast

from lfmserve.router.catalog import ModelSpec
from lfmserve.router.child import Child
from lfmserve.router.spawn import ChildStart, Spawner
from lfmserve.settings import Settings

#: How long a test waits for the loop to reach a state it expects (only a bug makes it wait that long).
_UNTIL_S = 10.0
_SETTINGS = Settings()


def spec(name: str, *aliases: str, ttl_s: float = 0.0, stop_timeout_s: float = 10.0) -> ModelSpec:
    """A model whose child is a :class:`FakeProcess` (no files: nothing reads them)."""
    return ModelSpec(name, aliases, (), "preset", _SETTINGS, ttl_s=ttl_s, stop_timeout_s=stop_timeout_s)


async def describe(child: Child) -> dict[str, Any]:
    """The child's ``/v1/models`` entry, as the router asks for it once the child is ready."""
    return {"id": child.name}


async def until(condition: Callable[[], object], timeout_s: float = _UNTIL_S) -> None:
    """Let the event loop run until ``condition()`` holds (polled once a turn of the loop)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"still not {condition}"
        await asyncio.sleep(0)


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeProcess:
    """The parts of a :class:`~multiprocessing.process.BaseProcess` that :class:`Child` reads, and the child's end
    of its control line."""

    def __init__(self, start: ChildStart) -> None:
        self.name = start.name
        self.pid: int | None = None
        self.exitcode: int | None = None
        self.killed = False
        self.ready = False
        self.sentinel, self._exit_pipe = os.pipe()
        self._control = start.control.dup()  # the router closes its copy once the child is started
        self._control.setblocking(False)
        self._heard = b""

    @property
    def alive(self) -> bool:
        return self.exitcode is None

    def join(self, timeout: float | None = None) -> None:
        """Nothing to wait for: ``exitcode`` is set before the sentinel shows the exit."""

    def kill(self) -> None:
        self.killed = True

    def asked_to_exit(self) -> bool:
        """Whether the router wrote ``exit`` on the control line."""
        with contextlib.suppress(BlockingIOError):
            self._heard += self._control.recv(64)
        return b"exit\n" in self._heard

    def tell_ready(self) -> None:
        """Report the model loaded, as a child does once it serves."""
        self._control.sendall(b'{"state": "ready"}\n')
        self.ready = True

    def end(self) -> int:
        """Exit now: killed (-9), asked to (0), else of itself (a crash: 1). Returns the exit code."""
        self.exitcode = -signal.SIGKILL if self.killed else 0 if self.asked_to_exit() else 1
        os.write(self._exit_pipe, b"x")
        self._control.close()
        return self.exitcode

    def close(self) -> None:
        """Give the test's file descriptors back."""
        self._control.close()
        os.close(self.sentinel)
        os.close(self._exit_pipe)


def fake_process(child: Child) -> FakeProcess:
    """The fake process behind ``child``."""
    process: object = child.process
    assert isinstance(process, FakeProcess)
    return process


class FakeSpawner(Spawner):
    """Starts a :class:`FakeProcess` per load, and keeps them; ``refuse`` makes the next start fail as a fork that
    cannot be made does (``refused`` lists the models whose start failed)."""

    def __init__(self) -> None:  # no fork server: none of the base's state is used (and its preload is global)
        self.processes: list[FakeProcess] = []
        self.refuse: OSError | None = None
        self.refused: list[str] = []

    def start(self, start: ChildStart) -> BaseProcess:
        refusal, self.refuse = self.refuse, None
        if refusal is not None:
            self.refused.append(start.name)
            raise refusal
        process = FakeProcess(start)
        self.processes.append(process)
        return cast(BaseProcess, process)  # Child reads only what FakeProcess has

    def live(self) -> list[FakeProcess]:
        return [process for process in self.processes if process.alive]

    def close(self) -> None:
        for process in self.processes:
            process.close()
