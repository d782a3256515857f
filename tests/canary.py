"""A loopback listener that counts the connections made to it: a test plants its address in what a client sends
(a playlist, a URL-shaped field), and any connection means the server fetched something a client named."""

from __future__ import annotations

import selectors
import socket
import threading
import time
from types import TracebackType


class Canary:
    """Counts connections to ``127.0.0.1:port``; :meth:`settle` makes the count exact at a point in time.

    Example::

        with Canary() as canary:
            send(f"http://127.0.0.1:{canary.port}/x.ts")
            assert canary.settle() == 0
    """

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port: int = self._listener.getsockname()[1]
        self._peers: list[tuple[str, int]] = []
        self._sentinels: set[tuple[str, int]] = set()
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="canary", daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def settle(self, timeout_s: float = 60.0) -> int:
        """The connections others made so far: a connection of the test's own goes into the backlog after theirs,
        and once it is accepted every earlier one has been (accept takes the backlog in order)."""
        with socket.create_connection(("127.0.0.1", self.port)) as own:
            mine = own.getsockname()
            deadline = time.monotonic() + timeout_s
            with self._changed:
                self._sentinels.add(mine)
                while mine not in self._peers:
                    left = deadline - time.monotonic()
                    assert left > 0, "the canary's own connection was never accepted"
                    self._changed.wait(left)
                return len(self._peers) - len(self._sentinels)

    def close(self) -> None:
        self._stopping.set()
        self._thread.join()
        self._listener.close()

    def __enter__(self) -> Canary:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            while not self._stopping.is_set():
                if not selector.select(timeout=0.2):
                    continue
                connection, peer = self._listener.accept()
                connection.close()  # whatever it asked for gets nothing
                with self._changed:
                    self._peers.append(peer[:2])
                    self._changed.notify_all()
