"""One ``POST /tools`` call: the tool found among those enabled, its folder and runtime read from the headers
(never from the parameters the model wrote), run, and its answer or failure in llama-server's shapes.

A request the server cannot act on raises :class:`CallRefused` with llama-server's status and bare error object
(``{"code", "message", "type"}``, not wrapped in ``{"error": ...}``; an unknown tool is a 404 whose body says
400, as llama-server's does). A tool's own failure (a missing file, an edit that does not apply) is an answer,
``{"error": message}``, for the model that called it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .files import edit_file, file_glob_search, read_file, write_file
from .params import BadParams, ToolFailed
from .paths import OutsideRoot
from .runtime import RuntimeRefused, ToolRuntime
from .search import grep_search
from .shell import exec_shell_command, get_info
from .toolio import ToolIO

Tool = Callable[[Mapping[str, Any], ToolIO], dict[str, Any]]
TOOLS: dict[str, Tool] = {
    "read_file": read_file,
    "file_glob_search": file_glob_search,
    "grep_search": grep_search,
    "exec_shell_command": exec_shell_command,
    "write_file": write_file,
    "edit_file": edit_file,
    "get_info": get_info,
}
#: The one tool whose output streams.
STREAMING = "exec_shell_command"


class CallRefused(Exception):
    def __init__(self, status: int, code: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"code": code, "message": message, "type": kind}


@dataclass(frozen=True, slots=True)
class Call:
    """A call as the route read it: the tool, its parameters, the headers that set its folder and runtime."""

    tool: str
    params: Mapping[str, Any]
    stream: bool = False
    cwd: str = ""
    runtime: str = ""
    resp_type: str = ""


def check(call: Call, enabled: tuple[str, ...]) -> None:
    """Refuse a call to a tool that is not enabled, or a stream of one that does not stream."""
    if call.tool not in enabled:
        raise CallRefused(404, 400, f'unknown tool "{call.tool}"', "invalid_request_error")
    if call.stream and call.tool != STREAMING:
        raise CallRefused(404, 400, f'tool "{call.tool}" does not support stream = true', "invalid_request_error")


def run(call: Call, runtime: ToolRuntime, chunk: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """The call's answer, on this machine or in the runtime's isolate (``chunk``: each piece of a streamed
    command's output as it comes). A runtime that cannot be used is llama-server's 500, never this machine."""
    params = {k: v for k, v in call.params.items() if k not in ("cwd", "runtime", "resp_type")}
    if call.resp_type:
        params["resp_type"] = call.resp_type
    try:
        io = runtime.io(call.cwd, call.runtime)
        if call.tool == STREAMING and chunk is not None:
            return exec_shell_command(params, io, chunk)
        return TOOLS[call.tool](params, io)
    except RuntimeRefused as exc:
        raise CallRefused(500, 500, str(exc), "server_error") from None
    except BadParams as exc:
        raise CallRefused(400, 400, str(exc), "invalid_request_error") from None
    except (ToolFailed, OutsideRoot) as exc:
        return {"error": str(exc)}
