"""A child's side of its control line to the router (the router's side is :mod:`.child`).

The child reports ``ready`` and ``failed`` (with the one line it prints), and a watcher thread reads the line:
``exit``, or its end when the router has died, stops the child as SIGTERM does (running requests drain). The
child also asks the kernel to kill it when its parent, the fork server, exits, which the fork server does when
the router dies: even a child stuck in a model load does not outlive its router.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass

from .spawn import ChildStart

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
#: How long a child asked to stop may take before it ends itself: the drain, and then some.
_EXIT_GRACE_S = 30.0


def process_name(model: str) -> bytes:
    """A child's process name (``/proc/PID/comm``, 15 bytes at most): ``lfm:`` and the start of its model's name."""
    return ("lfm:" + model).encode()[:15]


@dataclass(frozen=True, slots=True)
class ChildLink:
    name: str
    sockets: list[socket.socket]
    control: socket.socket

    @classmethod
    def open(cls, start: ChildStart) -> ChildLink:
        """Die with the router, take the child's own name and command line (not the router's, which the fork
        server's start copied into ``sys.argv``), and start following the control line."""
        sys.argv[1:] = start.argv
        if sys.platform == "linux":
            with contextlib.suppress(OSError, AttributeError):
                libc = ctypes.CDLL(None, use_errno=True)
                libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                libc.prctl(_PR_SET_NAME, process_name(start.name))  # what ps and top show for the child
        link = cls(start.name, [start.listener], start.control)
        threading.Thread(target=link._follow, name="lfmserve-router-link", daemon=True).start()
        return link

    def ready(self) -> None:
        self._send({"state": "ready"})

    def failed(self, message: str) -> None:
        print(f"lfmserve: error: [{self.name}] {message}", file=sys.stderr)
        self._send({"state": "failed", "error": message})

    def _send(self, state: dict[str, str]) -> None:
        with contextlib.suppress(OSError):
            self.control.sendall(json.dumps(state).encode() + b"\n")

    def _follow(self) -> None:
        """Wait for ``exit`` or the line's end, then stop as SIGTERM does; end for good if that takes too long."""
        with contextlib.suppress(OSError), self.control.makefile("rb") as lines:
            for line in lines:
                if line.strip() == b"exit":
                    break
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Timer(_EXIT_GRACE_S, os._exit, args=(1,)).start()
