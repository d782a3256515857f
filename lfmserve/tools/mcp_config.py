"""The MCP servers' configuration (Cursor's ``mcpServers`` format, as llama-server reads it), read when the flags
are parsed: this module does not import the ``mcp`` SDK, which :mod:`.mcp_servers` does when servers are set."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout_ms: int = 30000


def parse_config(text: str, configs: list[McpServerConfig]) -> None:
    """Add the servers of one ``{"mcpServers": {...}}`` document to ``configs`` (a name already there is skipped
    with a warning); ValueError with llama-server's message if it is not such a document."""
    try:
        document = json.loads(text)
        servers = document["mcpServers"] if isinstance(document, dict) else None
        if not isinstance(servers, dict):
            raise ValueError('"mcpServers" is not an object')
    except (ValueError, KeyError) as exc:
        raise ValueError(f"failed to parse MCP config JSON: {exc}") from None
    if not servers:
        logger.warning("MCP config: no servers found in JSON")
    for name, entry in servers.items():
        entry = entry if isinstance(entry, dict) else {}
        command = entry.get("command")
        if not isinstance(command, str) or not command:
            logger.warning("MCP server '%s' has no command, skipping", name)
            continue
        if any(config.name == name for config in configs):
            logger.warning("MCP config: duplicate server name '%s', skipping", name)
            continue
        args = entry.get("args")
        env = entry.get("env")
        timeout = entry.get("timeout_ms")
        configs.append(
            McpServerConfig(
                name,
                command,
                tuple(str(a) for a in args) if isinstance(args, list) else (),
                {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
                entry.get("cwd") if isinstance(entry.get("cwd"), str) and entry.get("cwd") else None,
                int(timeout) if isinstance(timeout, int) and not isinstance(timeout, bool) else 30000,
            )
        )


def read_configs(path: str | None, text: str | None) -> tuple[McpServerConfig, ...]:
    """The servers of ``--mcp-servers-config`` (the file), then of ``--mcp-servers-json``."""
    configs: list[McpServerConfig] = []
    if path:
        try:
            with open(path, encoding="utf-8") as file:
                document = file.read()
        except OSError:
            raise ValueError(f"failed to open MCP config file: {path}") from None
        parse_config(document, configs)
    if text:
        parse_config(text, configs)
    return tuple(configs)
