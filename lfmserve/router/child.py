"""One model's child process, seen from the router: its port, its state, its exit.

The router and a child talk over a control line (a socket pair). The child writes one JSON object per line:
``{"state": "ready"}`` once its model is loaded and it serves, ``{"state": "failed", "error": "..."}`` when it
cannot (the one line it would print before exiting). The router writes ``exit`` to ask it to stop: the child
drains its requests and exits 0. When the router dies, the child reads the end of the line and exits too, so no
child outlives its router.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import signal
import socket
from collections.abc import Collection
from multiprocessing.process import BaseProcess

from ..process_memory import mapped_bytes, process_memory
from ..settings import Settings
from ..settings.placement import FULL_CONTEXT
from .spawn import ChildStart, Spawner, forkserver_alive

logger = logging.getLogger(__name__)
CHILD_HOST = "127.0.0.1"
#: The router's server settings that are not a child's (see :func:`child_argv`).
_ROUTER_SERVER_ONLY = ("host", "port", "ssl_cert_file", "ssl_key_file", "api_prefix", "reuse_port")
#: What multiprocessing reports as the exit code of a child whose fork server died.
_LOST = 255
#: How long a fork server whose line closed has to be seen exiting (polled): far longer than the kernel takes.
_FORKSERVER_EXIT_POLLS, _FORKSERVER_EXIT_POLL_S = 50, 0.02


class ChildFailed(Exception):
    """A child that stopped before it was ready, or died: why, and its exit code (None while it still runs)."""

    def __init__(self, message: str, exit_code: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def child_argv(settings: Settings, name: str, port: int) -> list[str]:
    """A child's flags, as ``status.args`` lists them after the program: the model's settings on loopback, under
    its name, with the context size and ``--jinja`` always written (clients such as Frigate read them there).
    Never ``--log-file``: the child logs to the stderr it shares with the router, which alone writes the file
    (as llama-server's router drops ``LLAMA_ARG_LOG_FILE`` from its children's). Nor the router's own server: it
    calls the child over plain HTTP at its root, on a socket it binds (no TLS files, ``--api-prefix`` or
    ``--reuse-port``)."""
    defaults = Settings().server
    argv = ["--host", CHILD_HOST, "--port", str(port)]
    own = {field: getattr(defaults, field) for field in _ROUTER_SERVER_ONLY}
    argv += settings.replace(**own, alias=name, log_file=None).to_argv()
    if "--ctx-size" not in argv:
        argv += ["--ctx-size", str(settings.engine.ctx_size)]
        if settings.devices.fit_ctx != FULL_CONTEXT:  # after -c 0, which alone asks --fit for the full context
            argv += ["--fit-ctx", str(settings.devices.fit_ctx)]
    if settings.chat.jinja and "--jinja" not in argv:
        argv.append("--jinja")
    return argv


class Child:
    """A started child; ``ready`` resolves when it serves (or raises :class:`ChildFailed`), ``exited`` with its exit
    code."""

    def __init__(self, name: str, process: BaseProcess, port: int, argv: list[str], api_key: str) -> None:
        self.name = name
        self.process = process
        self.port = port
        self.argv = argv
        self.api_key = api_key
        self.error: str | None = None
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = loop.create_future()
        self.exited: asyncio.Future[int] = loop.create_future()
        self._writer: asyncio.StreamWriter | None = None
        self._follow: asyncio.Task[None] | None = None
        self._stopping: asyncio.Task[int] | None = None
        self._finishing: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, spawner: Spawner, name: str, settings: Settings) -> Child:
        """Bind a loopback port, fork the child onto it, and follow its control line. When the child cannot be
        started, every socket made for it is closed before the error goes on."""
        ours, theirs = socket.socketpair()
        try:
            # Ours to close either way: a started child holds its own copies of these two.
            with theirs, socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
                listener.bind((CHILD_HOST, 0))
                port = listener.getsockname()[1]
                argv = child_argv(settings, name, port)
                api_key = secrets.token_urlsafe(24)
                start = ChildStart(name, tuple(argv), listener, theirs, api_key)
                process = await asyncio.to_thread(spawner.start, start)
        except BaseException:
            ours.close()
            raise
        child = cls(name, process, port, argv, api_key)
        reader, child._writer = await asyncio.open_connection(sock=ours)
        asyncio.get_running_loop().add_reader(process.sentinel, child._on_exit)
        child._follow = asyncio.create_task(child._read_states(reader))
        return child

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://{CHILD_HOST}:{self.port}"

    async def _read_states(self, reader: asyncio.StreamReader) -> None:
        """Follow the child's reports until its end of the line closes (reset, when it died with ``exit`` unread)."""
        with contextlib.suppress(ConnectionError):
            while line := await reader.readline():
                self._take_state(line)

    def _take_state(self, line: bytes) -> None:
        try:
            state = json.loads(line)
        except ValueError:
            return
        if state.get("state") == "ready" and not self.ready.done():
            self.ready.set_result(None)
        elif state.get("state") == "failed":
            self.error = str(state.get("error") or "failed")

    def _on_exit(self) -> None:
        asyncio.get_running_loop().remove_reader(self.process.sentinel)
        self._finishing = asyncio.create_task(self._finish())

    async def _finish(self) -> None:
        code = await self._exit_code()
        if not self.ready.done():
            self.ready.set_exception(ChildFailed(self.failure(code), code))
            self.ready.exception()  # retrieved here: nobody may be waiting
        if self._writer is not None:
            self._writer.close()
        if not self.exited.cancelled():  # cancelled with the task that awaited it (the router closing)
            self.exited.set_result(code)

    async def _exit_code(self) -> int:
        """The exit code the fork server reports. When the fork server itself is gone nobody can tell (multiprocessing
        says 255): its children die with it (each asked the kernel for that), and this one is killed to be sure."""
        self.process.join(0)
        code = self.process.exitcode
        if code != _LOST:
            return -1 if code is None else code
        # The fork server's end of the line closes a moment before the kernel reports it exited.
        for _ in range(_FORKSERVER_EXIT_POLLS):
            if not forkserver_alive():
                self.error = self.error or "its fork server stopped"
                self.kill()
                return -signal.SIGKILL
            await asyncio.sleep(_FORKSERVER_EXIT_POLL_S)
        return code

    def failure(self, code: int) -> str:
        """Why the child stopped: its own line, else its exit code or signal."""
        if self.error:
            return self.error
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        return f"exited with code {code}"

    def stop(self, timeout_s: float) -> asyncio.Task[int]:
        """Ask the child to exit; kill it after ``timeout_s`` (at once while it is still loading). The task ends
        with its exit code; asking again joins the stop already under way."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop(timeout_s))
        return self._stopping

    async def _stop(self, timeout_s: float) -> int:
        if not self.exited.done():
            if self.ready.done() and self._writer is not None and not self._writer.is_closing():
                self._writer.write(b"exit\n")
                with contextlib.suppress(ConnectionError, asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self.exited), timeout_s)
            if not self.exited.done():
                self.kill()
        return await self.exited

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, OSError, AttributeError):
            self.process.kill()

    def memory(self, model_files: Collection[str]) -> dict[str, int] | None:
        """The child's resident memory (:class:`~..process_memory.ProcessMemory`) and ``held``, what it holds of its
        own: its anonymous memory and its model files' resident pages (:func:`~..process_memory.held_bytes`, not
        the libraries every child shares); None once it is gone. Reads ``/proc``: call it off the event loop where
        it can wait."""
        memory = process_memory(self.pid)
        if memory is None:
            return None
        return {**memory.to_json(), "held": memory.anonymous + mapped_bytes(self.pid, model_files)}
