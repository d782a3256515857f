"""How a router starts its children: forked from a server process that has already imported lfmserve.

A fresh interpreter spends seconds importing FastAPI, pydantic, llama.cpp's bindings and lfmserve before it
reads a model. The fork server (multiprocessing's ``forkserver``) pays that once, when the router starts, and
forks a copy of itself for each model load, so a child pays only for loading its model. The fork server has
imported modules and started no thread, so forking it is safe; its children share its imported pages, which its
preload (:mod:`.preload`) freezes for the garbage collector so that a child's collections do not copy them.

What a child gets (:class:`ChildStart`) travels over the fork server's own socket, never in a command line or
an environment (``/proc/PID/cmdline`` and ``environ`` are readable by every local user): its flags, its secrets,
and as file descriptors a listening socket the router has already bound on loopback (no port can be taken in
between) and its end of a control line to the router (see :mod:`.child`). The router removes every secret from
its environment before the fork server starts (:func:`drop_secret_variables`), so neither it nor a child inherits
one.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess

from ..settings.argv import secret_variables


@dataclass(frozen=True, slots=True)
class ChildStart:
    """What a child process is started with."""

    name: str
    #: The child's flags (``status.args`` after the program), ``--host 127.0.0.1 --port N --alias NAME`` included.
    argv: tuple[str, ...]
    listener: socket.socket
    control: socket.socket
    #: The one API key the child accepts, its own and random, so nothing but the router can call a child.
    api_key: str
    #: The router's Hugging Face token (``--hf-token``, ``HF_TOKEN``), for a child that downloads its model.
    hf_token: str | None = None


def drop_secret_variables() -> None:
    """Remove the variables that carry secrets from this process's environment (the router has read them), so
    that the fork server and every child start without them."""
    for variable in secret_variables():
        os.environ.pop(variable, None)


def forkserver_alive() -> bool:
    """Whether the fork server runs (asked without reaping it, so multiprocessing still sees it exit and starts a
    new one on the next start)."""
    from multiprocessing import forkserver

    pid = vars(forkserver._forkserver).get("_forkserver_pid")  # multiprocessing has no public way to ask
    if pid is None:
        return False
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


class Spawner:
    """Starts ``target(ChildStart)`` in a child forked from the fork server, whose ``preload`` modules are imported
    once; each child is also handed ``hf_token``."""

    def __init__(self, target: Callable[[ChildStart], None], preload: Sequence[str], hf_token: str | None) -> None:
        self._target = target
        self._hf_token = hf_token
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(list(preload))
        self._warming: threading.Thread | None = None

    def warm(self) -> None:
        """Start the fork server now, in a thread, so the first load does not wait for its imports."""
        from multiprocessing import forkserver

        self._warming = threading.Thread(target=forkserver.ensure_running, name="lfmserve-forkserver", daemon=True)
        self._warming.start()

    def start(self, start: ChildStart) -> BaseProcess:
        """The started child (call from a worker thread: the first call may wait for the fork server)."""
        if self._warming is not None:
            self._warming.join()
        start = dataclasses.replace(start, hf_token=self._hf_token)
        process = self._context.Process(target=self._target, args=(start,), name=f"lfmserve-{start.name}")
        process.start()
        return process
