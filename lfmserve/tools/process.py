"""One program run for a tool, as llama-server's ``run_subprocess`` runs it: its output (stdout, and stderr too
unless the bytes must stay a file's) kept up to a bound and the rest read and dropped, the bytes given on its
stdin, then stdin closed; killed with its whole process group at its timeout (llama-server kills the program
only, and a child that holds the pipe keeps the call waiting)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass

READ_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Ran:
    output: bytes
    exit_code: int
    timed_out: bool
    truncated: bool


def run(
    argv: list[str],
    *,
    max_output: int,
    timeout_s: float,
    cwd: str | None = None,
    chunk: Callable[[bytes], bool] | None = None,
    stdin: bytes | None = None,
    stderr: bool = True,
) -> Ran:
    """Run ``argv`` (in ``cwd``: None, the server's folder); ``chunk`` gets each piece of output kept (False:
    stop, the process is killed); ``stderr`` False drops stderr instead of mixing it into the output.

    >>> run(["echo", "hi"], max_output=16, timeout_s=5).output
    b'hi\\n'
    """
    try:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if stderr else subprocess.DEVNULL,
            start_new_session=True,  # its own process group, killed whole
        )
    except OSError:
        return Ran(b"failed to spawn process", -1, False, False)
    assert process.stdout is not None
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        kill(process)

    timer = threading.Timer(max(timeout_s, 0), expire)
    timer.start()
    try:
        _feed(process, stdin)
        kept, truncated = _drain(process, max_output, chunk)
        code = process.wait()
    finally:
        timer.cancel()
        process.stdout.close()
    return Ran(kept, 1 if code < 0 else code, timed_out.is_set(), truncated)


def _feed(process: subprocess.Popen[bytes], data: bytes | None) -> None:
    """Write ``data`` whole, then close stdin: a transport (``ssh``, ``docker exec -i``) waits for its end."""
    if process.stdin is None:
        return
    try:
        process.stdin.write(data or b"")
    except OSError:
        pass  # a program that ends before reading it all: its exit code tells
    finally:
        try:
            process.stdin.close()
        except OSError:
            pass


def _drain(
    process: subprocess.Popen[bytes], max_output: int, chunk: Callable[[bytes], bool] | None
) -> tuple[bytes, bool]:
    """The output kept, read to its end (a full pipe would block the program), and whether some was dropped."""
    assert process.stdout is not None
    kept, truncated = bytearray(), False
    while piece := os.read(process.stdout.fileno(), READ_BYTES):
        room = max_output - len(kept)
        if len(piece) > room:
            piece, truncated = piece[: max(room, 0)], True
        if piece:
            kept += piece
            if chunk is not None and not chunk(piece):
                kill(process)
                break
    return bytes(kept), truncated


def kill(process: subprocess.Popen[bytes]) -> None:
    """Kill the process and everything it started (it leads its own process group)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
