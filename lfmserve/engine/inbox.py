"""The engine thread's inbox: commands queued from any thread and run on the engine thread between steps.

Only the engine thread touches the llama context and the slots, so every other thread asks it: a verb
(``submit``, ``cancel``) queues a command and returns, a slot command (``/slots`` erase, save, restore)
queues one and waits for its result. Once the engine is closing, the inbox refuses new commands, so that
no caller waits on a thread that has stopped.

Example::

    inbox = Inbox()
    inbox.send(lambda: waiting.append(request))  # any thread: returns at once
    n_erased = inbox.call(lambda: erase(slot_id))  # any thread: returns once the engine thread has run it
    inbox.run(block=True)  # the engine thread, between steps
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import TypeVar

from ..errors import Unavailable

T = TypeVar("T")


class Inbox:
    """Commands for the engine thread, run in the order they were queued; closed once the stop is queued.

    The lock makes queuing and closing one step each: a command queued before the close runs before the
    thread stops, and one queued after it is refused instead of left to wait forever.
    """

    def __init__(self) -> None:
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._open = True

    def send(self, command: Callable[[], None]) -> None:
        """Queue ``command``; raises :class:`Unavailable` once the inbox is closed (the server is shutting down)."""
        with self._lock:
            if not self._open:
                raise Unavailable("the server is shutting down")
            self._commands.put(command)

    def post(self, command: Callable[[], None]) -> None:
        """Queue ``command`` unless the inbox is closed: a cancel after the close has nothing left to stop."""
        with self._lock:
            if self._open:
                self._commands.put(command)

    def call(self, command: Callable[[], T]) -> T:
        """Run ``command`` on the engine thread and return its result here (or raise its exception here)."""
        done = threading.Event()
        box: list[T | BaseException] = []

        def run() -> None:
            try:
                box.append(command())
            except BaseException as exc:  # delivered to the caller
                box.append(exc)
            done.set()

        self.send(run)
        done.wait()
        result = box[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def close(self, last: Callable[[], None]) -> bool:
        """Queue ``last`` and refuse every command after it; False when the inbox was closed already."""
        with self._lock:
            if not self._open:
                return False
            self._open = False
            self._commands.put(last)
            return True

    def wake(self) -> None:
        """Wake the engine thread from a blocking :meth:`run` without giving it work (the media encoder's
        worker calls it when an encode ends); it needs no lock, since the command does nothing."""
        self._commands.put(_nothing)

    def run(self, *, block: bool) -> None:
        """Run every queued command, on the engine thread; with ``block``, wait for the first one to come."""
        try:
            command = self._commands.get(block=block)
            while True:
                command()
                command = self._commands.get_nowait()
        except queue.Empty:
            pass


def _nothing() -> None:
    """The command that only wakes the engine thread."""
