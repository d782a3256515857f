"""``exec_shell_command`` and ``get_info``: a command run by ``sh -c`` in the call's folder (on this machine or in
its isolate), its output (stdout and stderr together) kept up to a bound, killed with its whole process group at
its timeout (:mod:`.process`), then ``[exit code: N]``. The output can be streamed as it comes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .params import optional_int, required
from .toolio import ToolIO

#: llama-server's bounds: the output kept, the default and longest timeout.
MAX_OUTPUT = 16384
DEFAULT_TIMEOUT_S = 10
MAX_TIMEOUT_S = 60


def exec_shell_command(
    params: Mapping[str, Any], io: ToolIO, chunk: Callable[[str], bool] | None = None
) -> dict[str, Any]:
    command = required(params, "command", str)
    timeout_s = min(optional_int(params, "timeout", DEFAULT_TIMEOUT_S), MAX_TIMEOUT_S)
    wanted = optional_int(params, "max_output_size", MAX_OUTPUT)
    max_output = MAX_OUTPUT if wanted < 0 else min(wanted, MAX_OUTPUT)
    decoded = None if chunk is None else (lambda piece: chunk(piece.decode(errors="replace")))
    ran = io.run(["sh", "-c", command], max_output=max_output, timeout_s=timeout_s, chunk=decoded)
    ending = f"\n[exit code: {ran.exit_code}]" + (" [exit due to timed out]" if ran.timed_out else "")
    if chunk is not None:
        chunk(ending)
    output = ran.output.decode(errors="replace") + ("\n[output truncated]" if ran.truncated else "")
    return {"plain_text_response": output + ending}


def get_info(params: Mapping[str, Any], io: ToolIO) -> dict[str, Any]:
    ran = io.run(["uname", "-a"], max_output=4096, timeout_s=5)
    name = ran.output.decode(errors="replace").strip() if ran.exit_code == 0 and not ran.timed_out else ""
    return {"os": name or "unknown", "cwd": io.current_folder()}
