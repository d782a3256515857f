"""A loopback listener that counts the connections made to it: a test plants its address in what a client sends
(a playlist, a URL-shaped field), and any connection means the server fetched something a client named."""

from __future__ import annotations

import selectors
import socket
import threading
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
        #: Every connection accepted, and the canary's own among them (one per :meth:`settle`).
        self._accepted = 0
        self._own = 0
        self._counting = threading.Lock()
        self._settling = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="canary", daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def settle(self, timeout_s: float = 60.0) -> int:
        """The connections others made so far: a connection of the test's own goes into the backlog after theirs,
        and the canary closes each one once it has counted it, so when the test's own reads its end every earlier
        one has been counted (accept takes the backlog in order). Counted by number, never by address: the kernel
        gives a closed connection's port out again (here within about 3000 connections)."""
        with self._settling, socket.create_connection(("127.0.0.1", self.port), timeout=timeout_s) as own:
            try:
                ended = own.recv(1) == b""
            except TimeoutError:
                ended = False
            assert ended, "the canary's own connection was never accepted"
            with self._counting:
                self._own += 1
                return self._accepted - self._own

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
                connection, _ = self._listener.accept()
                with self._counting:
                    self._accepted += 1
                connection.close()  # whatever it asked for gets nothing; only once counted (see settle)
