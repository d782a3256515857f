"""The rule that one thread computes on a native context, enforced: a decode or an encode from any other thread is
an error, not a slowdown found weeks later.

In the wheel's OpenMP build, every thread that computes a graph on more than one thread becomes the master of an
OpenMP team of its own, and the team's threads stay. A second team on a machine's cores (a warm-up decoded on the
loading thread, say) leaves every later step of the engine about a third slower on two cores; it was found twice
by measuring, never by a test. So each context binds to the first thread that computes on it, and a later compute
from another thread raises :class:`~lfmserve.errors.EngineError` instead of running.

The threads that compute are named in the kernel too (``/proc/self/task/*/comm``): OpenMP's workers inherit the
name of the thread that made them, so which team a thread belongs to can be read off a running server.

Example::

    owner = ComputeOwner("the llama context")
    owner.check()          # binds to this thread
    ...                    # from another thread: EngineError
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
import threading

from ..errors import EngineError

#: ``PR_SET_NAME`` (linux/prctl.h): the calling thread's name, at most 15 bytes.
_PR_SET_NAME = 15


class ComputeOwner:
    """The one thread allowed to compute on a native context: the first that does, until it ends (its OpenMP team
    ends with it: a projector outlives an engine put to sleep, and the next engine's thread takes it over)."""

    __slots__ = ("_owner", "_what")

    def __init__(self, what: str) -> None:
        self._what = what
        self._owner: threading.Thread | None = None

    def check(self) -> None:
        """Bind to the calling thread on its first call; raise if a later call comes from another thread while
        the owner lives."""
        current = threading.current_thread()
        if current is self._owner:
            return
        if self._owner is None or not self._owner.is_alive():
            self._owner = current
            return
        raise EngineError(
            f"{self._what} computes on thread {self._owner.name!r} only, not on {current.name!r}: "
            "a second computing thread gives OpenMP a second team of threads, and every later step slows down"
        )


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` (its first 15 bytes) in the kernel, where OpenMP's workers that it starts
    inherit it; nothing off Linux."""
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


@functools.cache
def _prctl() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl
    except (OSError, AttributeError):  # an unusual libc: the names are only for people and tools reading them
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    function.restype = ctypes.c_int
    return function
