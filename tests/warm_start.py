"""``lfmserve`` processes for tests, started warm: forked from a helper process that imported lfmserve once.

A fresh ``lfmserve`` spends about 1.2 s of CPU importing FastAPI, pydantic, numpy, llama.cpp's bindings and
lfmserve before it reads its flags; the suite starts about a hundred of them. Each test worker runs one helper
(``python -m tests.warm_start``) that imports all of that once and forks a copy of itself for each start; the copy
takes the test's command line, environment, working folder and output file, then runs the ``lfmserve`` command's
own function (:func:`lfmserve.cli.command`) and exits with its code, exit handlers run, as the command does. It is a
real process serving on a real socket, signalled, killed and reaped as one; what differs from an exec'd command is
what ``/proc/PID/cmdline`` and ``environ`` show (the helper's) and the pages it shares with the helper. So a test
whose point is the process image (secrets in ``/proc``, memory mappings, threads, the command's entry point)
starts its process cold (``Running(..., cold=True)``).

The helper imports nothing that reads the environment when imported (huggingface_hub's constants, which a
router's modules import, are read from ``HF_HUB_CACHE`` and the like at import): the started process imports
those itself, under the test's environment. The random module is reseeded in each fork by Python itself.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import traceback
import types
from pathlib import Path
from typing import IO, Any

#: What the helper imports before it forks: the command, the model server's app (and through it FastAPI, pydantic,
#: numpy, llama.cpp's bindings) and the settings. Not the router's modules (they import huggingface_hub's
#: constants, read from the environment on import).
PRELOAD = ("lfmserve.cli", "lfmserve.api.app", "lfmserve.api.server", "lfmserve.settings")
#: Modules the helper must not have imported: each fixes environment variables' values when imported.
READS_ENVIRONMENT_ON_IMPORT = ("huggingface_hub.constants",)


class WarmProcess:
    """A started process as :class:`subprocess.Popen` shows one to a test (``pid``, ``returncode``, ``poll``,
    ``wait``, the signals); its exit status comes from the helper, its parent."""

    stdout = None
    stderr = None

    def __init__(self, helper: Helper, pid: int) -> None:
        self._helper = helper
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self.returncode = self._helper.exit_code(self.pid, timeout_s=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._helper.exit_code(self.pid, timeout_s=timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"lfmserve (pid {self.pid})", timeout or 0)
        self.returncode = code
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Helper:
    """The test side of one helper process: start requests go down its stdin, its stdout answers each with the
    started process's id and, when one exits, its exit code (read by a thread, handed over under a condition)."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.warm_start"],
            cwd=Path(__file__).parents[1],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._changed = threading.Condition()
        self._started: list[int] = []
        self._exited: dict[int, int] = {}
        self._ended = False
        self._starting = threading.Lock()
        threading.Thread(target=self._read, name="warm-start-replies", daemon=True).start()

    def start(self, argv: list[str], env: dict[str, str], output: str) -> WarmProcess:
        request = {"argv": argv, "env": env, "cwd": os.getcwd(), "output": output}
        with self._starting:
            assert self._process.stdin is not None
            self._process.stdin.write(json.dumps(request).encode() + b"\n")
            self._process.stdin.flush()
            with self._changed:
                self._changed.wait_for(lambda: self._started or self._ended)
                assert self._started, f"the warm-start helper ended with {self._process.poll()}"
                return WarmProcess(self, self._started.pop(0))

    def exit_code(self, pid: int, timeout_s: float | None) -> int | None:
        """The process's exit code (minus the signal's number when one killed it), once it has exited; None when
        it still runs after ``timeout_s``."""
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exited or self._ended, timeout=timeout_s)
            return self._exited.get(pid)

    def close(self) -> None:
        """End the helper (the processes it started are their tests' to stop)."""
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            reply = json.loads(line)
            with self._changed:
                if "started" in reply:
                    self._started.append(reply["started"])
                else:
                    self._exited[reply["exited"]] = reply["code"]
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()


_helper: Helper | None = None
_helper_lock = threading.Lock()


def start(argv: list[str], env: dict[str, str], output: IO[bytes]) -> WarmProcess:
    """``argv`` (an ``lfmserve`` command line) started warm under ``env``, printing to the file ``output``; the
    worker's helper starts with the first call and ends with the worker."""
    global _helper
    with _helper_lock:
        if _helper is None:
            _helper = Helper()
            atexit.register(_helper.close)
    return _helper.start(argv, env, f"/proc/{os.getpid()}/fd/{output.fileno()}")


# -- the helper process ---------------------------------------------------------------------------------------


def _serve() -> None:
    """Import :data:`PRELOAD`, then fork one process per request line on stdin until stdin closes; answer on stdout
    with each process's id, and its exit code when it ends (a SIGCHLD wakes the loop)."""
    for module in PRELOAD:
        importlib.import_module(module)
    imported = [name for name in READS_ENVIRONMENT_ON_IMPORT if name in sys.modules]
    assert not imported, f"the warm-start helper must not import {imported}: they read the environment on import"
    gc.freeze()  # the forks' collections leave the shared imports' pages alone
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)  # nothing printed by accident can reach the replies
    os.close(null)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    own = (replies.fileno(), wake_read, wake_write, selector.fileno())  # none of them a fork's
    pending = b""
    while True:
        for key, _ in selector.select():
            if key.fd == wake_read:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_read, 4096)
                _reap(replies)
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                pid = _fork(json.loads(line), closing=own)
                replies.write(json.dumps({"started": pid}) + "\n")


def _reap(replies: IO[str]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        replies.write(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}) + "\n")


def _fork(request: dict[str, Any], closing: tuple[int, ...]) -> int:
    """Fork the process ``request`` asks for; in the fork, run it and exit (never return)."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in closing:
            os.close(fd)
        output = os.open(request["output"], os.O_WRONLY | os.O_APPEND)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _become_the_script(list(request["argv"]))
        code = _run_command()
    finally:
        os._exit(code)


def _become_the_script(argv: list[str]) -> None:
    """``sys`` as an exec'd console script ``argv[0]`` has it: its arguments, its folder first on the path, and
    itself as ``__main__`` (multiprocessing, which a router starts its children with, hands ``__main__``'s path to
    the processes it starts)."""
    sys.argv = argv
    sys.path[0] = os.path.dirname(argv[0])
    script = types.ModuleType("__main__")
    script.__file__ = argv[0]
    sys.modules["__main__"] = script


def _run_command() -> int:
    """The ``lfmserve`` command's function, with the interpreter's handling of its exit: ``SystemExit``'s code,
    a traceback and 1 for any other exception, then the exit handlers and the streams flushed."""
    from lfmserve.cli import command

    try:
        code = command()
    except SystemExit as exc:
        code = _system_exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def _system_exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    _serve()
