"""MCP servers' tools (``--mcp-servers-config FILE``, ``--mcp-servers-json JSON``, Cursor's ``mcpServers``
format: ``command``, ``args``, ``env``, ``cwd``, ``timeout_ms``), over stdio with the official ``mcp`` SDK.

As in llama-server, each server is started once when the server starts, to list its tools (named
``<server>_<tool>``; a server that fails to start or answer within 10 s is skipped with a warning), then
stopped. The first call starts it again and it is kept for the next calls; one that crashed is started again at
the next call (not within 5 s of a failed start), one that runs a call past its ``timeout_ms`` (30 s by default)
is stopped and the call answers an error. Stopping the server stops them all, ending the calls in flight.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from mcp import ClientSession, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client

from .mcp_config import McpServerConfig

logger = logging.getLogger(__name__)

#: How long a server may take to start and list its tools when the server starts; how long one that failed to
#: start is not tried again (llama-server's figures).
WARMUP_TIMEOUT_S = 10.0
COOLDOWN_S = 5.0


@dataclass(frozen=True, slots=True)
class McpTool:
    server: str
    tool: str
    description: str
    parameters: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.server}_{self.tool}"

    def listing(self) -> dict[str, Any]:
        """Its entry in ``GET /tools``, as llama-server writes an MCP tool's."""
        return {
            "display_name": self.name,
            "tool": self.name,
            "type": "mcp",
            "permissions": {"write": False},
            "uses_cwd": False,
            "definition": {
                "type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
            },
        }


class McpServers:
    """The configured servers, each started when first needed and kept for the next call, on an event loop of their
    own (the SDK's sessions live in tasks there; the web app's loop only awaits their answers)."""

    def __init__(self, configs: tuple[McpServerConfig, ...]) -> None:
        self._configs = {config.name: config for config in configs}
        self.tools: list[McpTool] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="lfmserve-mcp", daemon=True)
        self._thread.start()
        #: The running servers, and until when one that failed to start is not tried again (the loop's only).
        self._live: dict[str, _Live] = {}
        self._cooling: dict[str, float] = {}

    def warm_up(self) -> None:
        """List every server's tools, each started then stopped (10 s each at most)."""
        self.tools = asyncio.run_coroutine_threadsafe(self._listed(), self._loop).result()

    async def _listed(self) -> list[McpTool]:
        found: list[McpTool] = []
        for config in self._configs.values():
            live = _Live(config)
            try:
                async with asyncio.timeout(WARMUP_TIMEOUT_S):
                    listed = await (await live.started()).list_tools()
            except Exception as exc:  # any failure of a server's own: skipped, the others serve
                logger.warning("MCP warmup: failed to spawn '%s': %s", config.name, _reason(exc))
                continue
            finally:
                await live.stop()
            tools = [
                McpTool(config.name, tool.name, tool.description or "", _parameters(tool.input_schema))
                for tool in listed.tools
            ]
            logger.info("MCP warmup: '%s' discovered %d tools", config.name, len(tools))
            found += tools
        return found

    def call(self, tool: McpTool, arguments: Mapping[str, Any]) -> Future[dict[str, Any]]:
        """The tool's answer, to come: its text, or ``{"error": ...}`` when it failed, crashed or ran out of time."""
        return asyncio.run_coroutine_threadsafe(
            self._call(self._configs[tool.server], tool.tool, dict(arguments)), self._loop
        )

    async def _call(self, config: McpServerConfig, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        live = await self._running(config)
        if live is None:
            return {"error": f"MCP server unavailable: {config.name}"}
        try:
            session = await live.started()
            async with asyncio.timeout(config.timeout_ms / 1000):
                result = await session.call_tool(tool, arguments)
        except TimeoutError:
            await self._drop(config.name, live)  # a hung server is not kept
            return {"error": f"MCP tool call timed out after {config.timeout_ms} ms"}
        except MCPError as exc:
            if await _answers(session):  # the server answered the call with an error: it is kept
                return {"error": str(exc) or "MCP tool returned an error"}
            logger.warning("MCP '%s' is no longer alive: %s", config.name, _reason(exc))
            await self._drop(config.name, live)
            return {"error": f"MCP server unavailable: {config.name}"}
        except Exception as exc:
            logger.warning("MCP '%s' is no longer alive: %s", config.name, _reason(exc))
            await self._drop(config.name, live)
            return {"error": f"MCP server unavailable: {config.name}"}
        content = getattr(result, "content", None)
        if content is None:
            return {"error": "invalid response from MCP server"}
        text = "\n".join(item.text for item in content if getattr(item, "type", "") == "text")
        if getattr(result, "is_error", False):
            return {"error": text or "MCP tool returned an error"}
        return {"plain_text_response": text}

    async def _running(self, config: McpServerConfig) -> _Live | None:
        """The server's running process, started again if it is gone (not within 5 s of a failed start)."""
        live = self._live.get(config.name)
        if live is not None and live.alive:
            return live
        if live is not None:
            await self._drop(config.name, live)
        if time.monotonic() < self._cooling.get(config.name, 0.0):
            return None
        live = _Live(config)
        try:
            await live.started()
        except Exception as exc:
            logger.warning("MCP '%s': failed to start: %s", config.name, _reason(exc))
            await live.stop()
            self._cooling[config.name] = time.monotonic() + COOLDOWN_S
            return None
        self._live[config.name] = live
        return live

    async def _drop(self, name: str, live: _Live) -> None:
        if self._live.get(name) is live:
            del self._live[name]
        await live.stop()

    def close(self) -> None:
        """Stop every server (a call in flight answers an error at once), then the loop."""
        if self._loop.is_closed():
            return

        async def stop_all() -> None:
            for name, live in list(self._live.items()):
                await self._drop(name, live)

        asyncio.run_coroutine_threadsafe(stop_all(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


class _Live:
    """One server's process and session, held open by a task of the servers' loop until :meth:`stop`."""

    def __init__(self, config: McpServerConfig) -> None:
        self._session: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._hold(config))

    @property
    def alive(self) -> bool:
        return not self._task.done()

    async def started(self) -> ClientSession:
        return await asyncio.shield(self._session)

    async def _hold(self, config: McpServerConfig) -> None:
        try:
            async with _session(config) as session:
                self._session.set_result(session)
                await self._stop.wait()
        except Exception as exc:  # the process failed or ended: its calls see it
            if not self._session.done():
                self._session.set_exception(exc)

    async def stop(self) -> None:
        self._stop.set()
        if not self._session.done():
            self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def _answers(session: ClientSession) -> bool:
    """Whether the server still answers (a ping within 2 s): an error it sent, or the end of its process."""
    try:
        async with asyncio.timeout(2):
            await session.send_ping()
    except Exception:
        return False
    return True


@asynccontextmanager
async def _session(config: McpServerConfig) -> AsyncIterator[ClientSession]:
    parameters = StdioServerParameters(
        command=config.command, args=list(config.args), env={**os.environ, **config.env}, cwd=config.cwd
    )
    async with stdio_client(parameters) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def _parameters(schema: Any) -> dict[str, Any]:
    return schema if isinstance(schema, dict) else {}


def _reason(exc: BaseException) -> str:
    """The first failure of an exception group (anyio's task groups wrap them), or the exception."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
