"""``GET /tools`` and ``POST /tools`` with ``--tools``: the enabled built-in tools listed as llama-server lists
them, and one called (on a worker thread: a tool reads files and runs commands). ``"stream": true`` streams a
command's output as SSE events ``{"chunk": ...}``, then ``{"done": true}`` (with ``"error"`` if the call failed
once the stream had begun); a client that leaves ends the command. The calls run on this machine, or in the
isolate of ``--tools-runtime`` or of their ``x-tool-runtime`` header (:mod:`lfmserve.tools.runtime`). Added before
:mod:`.features`' 403 routes, which it then shadows."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..errors import LfmError
from ..settings import AgentSettings
from ..tools.calls import Call, CallRefused, check, run
from ..tools.catalog import TOOLS
from ..tools.runtime import RuntimeRefused, ToolRuntime

if TYPE_CHECKING:
    from ..tools.mcp_servers import McpServers, McpTool

logger = logging.getLogger(__name__)


def tools_router(settings: AgentSettings) -> tuple[APIRouter, Callable[[], None]]:
    """The routes of the enabled built-in tools and of the MCP servers' tools (listed now, once), and what stops
    the MCP servers and the tools' own container (at the drain: a call in flight ends then)."""
    listing = [TOOLS[name].listing(name) for name in settings.enabled_tools]
    servers, mcp_tools = _mcp_tools(settings, {entry["tool"] for entry in listing})
    try:  # --tools-runtime's program looked for, its container spawned: a failure is the start's error
        runtime = ToolRuntime(settings.tools_root, settings.tools_runtime)
    except RuntimeRefused as exc:
        raise LfmError(str(exc)) from None
    listing += [tool.listing() for tool in mcp_tools.values()]
    enabled = (*settings.enabled_tools, *mcp_tools)
    router = APIRouter()

    @router.get("/tools", include_in_schema=False)
    async def list_tools() -> list[dict[str, Any]]:
        return listing

    @router.post("/tools", include_in_schema=False)
    async def call_tool(request: Request) -> Response:
        try:
            call = _read_call(await request.body(), request)
            check(call, enabled)
        except CallRefused as refused:
            return JSONResponse(refused.body, status_code=refused.status)
        if call.tool in mcp_tools:
            assert servers is not None
            return JSONResponse(await asyncio.wrap_future(servers.call(mcp_tools[call.tool], call.params)))
        if call.stream:
            return StreamingResponse(_streamed(call, runtime, request), media_type="text/event-stream")
        try:
            return JSONResponse(await asyncio.to_thread(run, call, runtime))
        except CallRefused as refused:
            return JSONResponse(refused.body, status_code=refused.status)

    def close() -> None:
        if servers is not None:
            servers.close()
        runtime.close()

    return router, close


def _mcp_tools(settings: AgentSettings, taken: set[str]) -> tuple[McpServers | None, dict[str, McpTool]]:
    """The MCP servers and their tools by name (a name already taken is skipped, as llama-server skips it)."""
    if not settings.mcp_servers:
        return None, {}
    try:
        from ..tools.mcp_servers import McpServers
    except ImportError as exc:
        raise LfmError(f"MCP servers need the mcp package ({exc}): pip install 'lfmserve[mcp]'") from None
    servers = McpServers(settings.mcp_servers)
    servers.warm_up()
    tools: dict[str, McpTool] = {}
    for tool in servers.tools:
        if tool.name in taken or tool.name in tools:
            logger.warning(
                'MCP tool "%s" from server "%s" collides with an existing tool, skipping', tool.tool, tool.server
            )
            continue
        tools[tool.name] = tool
    return servers, tools


def _read_call(raw: bytes, request: Request) -> Call:
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise CallRefused(400, 400, f"invalid JSON: {exc}", "invalid_request_error") from None
    tool = body.get("tool") if isinstance(body, dict) else None
    if not isinstance(tool, str):
        raise CallRefused(400, 400, "[json.exception.out_of_range.403] key 'tool' not found", "invalid_request_error")
    params = body.get("params", {})
    stream = body.get("stream", False)
    if not isinstance(params, dict) or not isinstance(stream, bool):
        raise CallRefused(400, 400, '"params" is an object and "stream" a boolean', "invalid_request_error")
    headers = request.headers
    return Call(
        tool, params, stream, headers.get("x-tool-cwd", ""), headers.get("x-tool-runtime", ""),
        headers.get("x-resp-type", ""),
    )  # fmt: skip


async def _streamed(call: Call, runtime: ToolRuntime, request: Request) -> AsyncIterator[bytes]:
    """The command's output as it comes, from the worker thread through a queue; leaving ends the command."""
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue[str | None] = asyncio.Queue()
    leaving = False

    def chunk(text: str) -> bool:
        loop.call_soon_threadsafe(pieces.put_nowait, text)
        return not leaving

    async def work() -> str | None:
        try:
            answer = await asyncio.to_thread(run, call, runtime, chunk)
        except CallRefused as refused:
            return str(refused.body["message"])
        finally:
            loop.call_soon_threadsafe(pieces.put_nowait, None)
        error = answer.get("error")
        return str(error) if error is not None else None

    task = asyncio.ensure_future(work())
    try:
        while (text := await pieces.get()) is not None:
            if text:
                yield _event({"chunk": text})
        error = await task
        yield _event({"done": True, **({"error": error} if error is not None else {})})
    finally:
        leaving = True


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
