"""One ``POST /tools`` call: the tool found among those enabled, its folder and runtime read from the headers
(never from the parameters the model wrote), run, and its answer or failure in llama-server's shapes.

A request the server cannot act on raises :class:`CallRefused` with llama-server's status and bare error object
(``{"code", "message", "type"}``, not wrapped in ``{"error": ...}``; an unknown tool is a 404 whose body says
400, as llama-server's does). A tool's own failure (a missing file, an edit that does not apply) is an answer,
``{"error": message}``, for the model that called it."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .files import edit_file, file_glob_search, read_file, write_file
from .params import BadParams, ToolFailed
from .paths import CallPaths, OutsideRoot
from .search import grep_search
from .shell import exec_shell_command, get_info

Tool = Callable[[Mapping[str, Any], CallPaths], dict[str, Any]]
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


def run(call: Call, root: str | None, chunk: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """The call's answer (``chunk``: each piece of a streamed command's output as it comes)."""
    params = {k: v for k, v in call.params.items() if k not in ("cwd", "runtime", "resp_type")}
    if call.resp_type:
        params["resp_type"] = call.resp_type
    try:
        _check_runtime(call.runtime)
        paths = CallPaths(call.cwd, root)
        if call.tool == STREAMING and chunk is not None:
            return exec_shell_command(params, paths, chunk)
        return TOOLS[call.tool](params, paths)
    except BadParams as exc:
        raise CallRefused(400, 400, str(exc), "invalid_request_error") from None
    except (ToolFailed, OutsideRoot) as exc:
        return {"error": str(exc)}


_CONTAINER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SSH_TARGET = re.compile(r"[A-Za-z0-9._@][A-Za-z0-9._@-]*")


def _check_runtime(runtime: str) -> None:
    """``x-tool-runtime``: llama-server's containers and SSH hosts are refused with its messages when malformed,
    and with lfmserve's own when well formed (it runs tools on this machine only); never a fallback to it."""
    if not runtime:
        return
    for engine in ("docker", "podman"):
        if runtime.startswith(f"{engine}-container:"):
            ident = runtime.partition(":")[2]
            if not _CONTAINER_ID.fullmatch(ident):
                raise CallRefused(500, 500, f"invalid container id: {ident}", "server_error")
            break
        if runtime.startswith(f"{engine}:"):
            raise CallRefused(500, 500, f"tool runtime must name a running container: {runtime}", "server_error")
    else:
        if not runtime.startswith("ssh:"):
            raise CallRefused(500, 500, f"unknown tool runtime: {runtime}", "server_error")
        target = runtime[4:]
        if not _SSH_TARGET.fullmatch(target):
            raise CallRefused(500, 500, f"invalid ssh target: {target}", "server_error")
    raise CallRefused(
        500,
        500,
        f"tool runtime {runtime}: lfmserve runs tools on this machine only, not yet in a container or over ssh",
        "server_error",
    )
