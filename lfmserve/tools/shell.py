"""``exec_shell_command`` and ``get_info``: a command run by ``sh -c`` in the call's folder, its output (stdout and
stderr together) kept up to a bound and the rest read and dropped, killed with its whole process group at its
timeout (llama-server kills the shell only, and a child that holds the pipe keeps the call waiting), then
``[exit code: N]``. The output can be streamed as it comes."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .params import optional_int, required
from .paths import CallPaths

#: llama-server's bounds: the output kept, the default and longest timeout.
MAX_OUTPUT = 16384
DEFAULT_TIMEOUT_S = 10
MAX_TIMEOUT_S = 60
READ_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Ran:
    output: bytes
    exit_code: int
    timed_out: bool
    truncated: bool


def run(
    argv: list[str], *, cwd: str, max_output: int, timeout_s: float, chunk: Callable[[bytes], bool] | None = None
) -> Ran:
    """Run ``argv`` in ``cwd``; ``chunk`` gets each piece of output kept (False: stop, the process is killed)."""
    try:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, killed whole
        )
    except OSError:
        return Ran(b"failed to spawn process", -1, False, False)
    assert process.stdout is not None
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        _kill(process)

    timer = threading.Timer(max(timeout_s, 0), expire)
    timer.start()
    kept, truncated = bytearray(), False
    try:
        while piece := os.read(process.stdout.fileno(), READ_BYTES):
            room = max_output - len(kept)
            if len(piece) > room:
                piece, truncated = piece[: max(room, 0)], True
            if piece:
                kept += piece
                if chunk is not None and not chunk(piece):
                    _kill(process)
                    break
        code = process.wait()
    finally:
        timer.cancel()
        process.stdout.close()
    return Ran(bytes(kept), 1 if code < 0 else code, timed_out.is_set(), truncated)


def _kill(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def exec_shell_command(
    params: Mapping[str, Any], paths: CallPaths, chunk: Callable[[str], bool] | None = None
) -> dict[str, Any]:
    command = required(params, "command", str)
    timeout_s = min(optional_int(params, "timeout", DEFAULT_TIMEOUT_S), MAX_TIMEOUT_S)
    wanted = optional_int(params, "max_output_size", MAX_OUTPUT)
    max_output = MAX_OUTPUT if wanted < 0 else min(wanted, MAX_OUTPUT)
    decoded = None if chunk is None else (lambda piece: chunk(piece.decode(errors="replace")))
    ran = run(["sh", "-c", command], cwd=paths.folder, max_output=max_output, timeout_s=timeout_s, chunk=decoded)
    ending = f"\n[exit code: {ran.exit_code}]" + (" [exit due to timed out]" if ran.timed_out else "")
    if chunk is not None:
        chunk(ending)
    output = ran.output.decode(errors="replace") + ("\n[output truncated]" if ran.truncated else "")
    return {"plain_text_response": output + ending}


def get_info(params: Mapping[str, Any], paths: CallPaths) -> dict[str, Any]:
    ran = run(["uname", "-a"], cwd=paths.folder, max_output=4096, timeout_s=5)
    name = ran.output.decode(errors="replace").strip() if ran.exit_code == 0 and not ran.timed_out else ""
    return {"os": name or "unknown", "cwd": paths.cwd or paths.folder}
