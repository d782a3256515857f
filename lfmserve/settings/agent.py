"""The agent surface llama-server turns on by flags: its built-in tools (on this machine, in a container or over
ssh), MCP servers' tools and the web UI's CORS proxy (docs/agent.md). Each is off by default; the tool names, the
tools' runtime and the MCP configuration are checked when parsed.

One group of :class:`~lfmserve.settings.Settings` (:mod:`.groups` lists them all).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from .fields import OnOffAction, flag, switch

if TYPE_CHECKING:
    from ..tools.mcp_config import McpServerConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSettings:
    """What agents may reach through this server: tools, MCP servers, the CORS proxy."""

    TITLE: ClassVar[str] = "agent tools (off unless asked for)"

    tools: str | None = field(
        default=None,
        metadata=flag(
            "--tools",
            help="built-in tools for AI agents at /tools, comma-separated, or 'all': read_file, file_glob_search, "
            "grep_search, exec_shell_command, write_file, edit_file, get_info; they read, write and run what this "
            "server's user may, so --cors-origins defaults to localhost with them (default: none; /tools is 403)",
            environment=("LLAMA_ARG_TOOLS",),
        ),
    )
    tools_root: str | None = field(
        default=None,
        metadata=flag(
            "--tools-root",
            help="confine the file tools to this folder (paths that lead out, by ../, absolute paths or links, are "
            "refused) and run shell commands in it; this machine only: no runtime with it (not in llama-server)",
        ),
    )
    tools_runtime: str | None = field(
        default=None,
        metadata=flag(
            "--tools-runtime",
            help="run the tools elsewhere: 'docker:IMAGE' or 'podman:IMAGE' (a container spawned at start, removed "
            "at exit), 'docker-container:ID' or 'podman-container:ID' (a running one), 'ssh:TARGET' (a POSIX host, "
            "key-based auth and a trusted host key; remoting, not isolation); the program must be on PATH; a "
            "call's x-tool-runtime header wins (default: none, this machine)",
            environment=("LLAMA_ARG_TOOLS_RUNTIME",),
        ),
    )
    mcp_servers_config: str | None = field(
        default=None,
        metadata=flag(
            "--mcp-servers-config",
            help="JSON file of MCP servers (Cursor's mcpServers: command, args, env, cwd, timeout_ms) whose tools "
            "/tools serves as <server>_<tool> (needs pip install 'lfmserve[mcp]')",
            environment=("LLAMA_ARG_MCP_SERVERS_CONFIG",),
        ),
    )
    mcp_servers_json: str | None = field(
        default=None,
        repr=False,  # its servers' env may hold their tokens: not in listings, logs or a router child's argv
        metadata=flag(
            "--mcp-servers-json",
            help="the same as JSON text, after the file's servers",
            environment=("LLAMA_ARG_MCP_SERVERS_JSON",),
            secret=True,
        ),
    )
    ui_mcp_proxy: bool = switch(
        "--ui-mcp-proxy",
        "--webui-mcp-proxy",
        "--no-ui-mcp-proxy",
        "--no-webui-mcp-proxy",
        help="serve /cors-proxy?url=URL, which fetches URL for the web UI (its remote MCP servers and pages): "
        "anything this server can reach, for any caller the key and CORS let through (default: off, 403)",
        default=False,
        action=OnOffAction,
    )
    agent: bool = switch(
        "-ag",
        "--agent",
        "-no-ag",
        "--no-agent",
        help="--tools all and --ui-mcp-proxy together, for the web UI's agent (default: off)",
        default=False,
        action=OnOffAction,
    )
    #: What the flags above give, read when parsed (:meth:`__post_init__`).
    _tools: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)
    _mcp: tuple[McpServerConfig, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Check the tool names and read the MCP servers' configuration now: a bad one is the parse's one error
        line. The tools' modules are imported only when tools are asked for; the ``mcp`` SDK not even then."""
        if self.tools is not None or self.agent:
            from ..tools.catalog import enabled_tools  # only with --tools: no tool code is imported otherwise

            asked = ["all"] if self.agent else next(csv.reader([self.tools or ""]), [""])
            object.__setattr__(self, "_tools", enabled_tools(asked))
        if self.tools_runtime:
            self._check_runtime(self.tools_runtime)
        if self.mcp_servers_config or self.mcp_servers_json:
            from ..tools.mcp_config import read_configs  # the configuration only: not the mcp SDK

            object.__setattr__(self, "_mcp", read_configs(self.mcp_servers_config, self.mcp_servers_json))

    def _check_runtime(self, runtime: str) -> None:
        """``--tools-runtime`` read as llama-server reads it, its program looked for on PATH.
        ``--tools-root`` confines paths of this machine, so the two together are refused rather than one ignored."""
        if self.tools_root is not None:
            raise ValueError("--tools-root keeps the tools on this machine: it cannot be used with --tools-runtime")
        from ..tools.runtime import check_flag  # only with --tools-runtime

        check_flag(runtime)

    @property
    def enabled_tools(self) -> tuple[str, ...]:
        """The built-in tools ``--tools`` enables, in llama-server's order (checked when parsed)."""
        return self._tools

    @property
    def mcp_servers(self) -> tuple[McpServerConfig, ...]:
        """The MCP servers of ``--mcp-servers-config``, then of ``--mcp-servers-json``."""
        return self._mcp

    @property
    def serves_tools(self) -> bool:
        """Whether ``/tools`` serves: built-in tools or MCP servers, as in llama-server."""
        return bool(self._tools or self._mcp)

    @property
    def cors_proxy(self) -> bool:
        """Whether ``/cors-proxy`` fetches for its callers (``--ui-mcp-proxy``, ``--agent``)."""
        return self.ui_mcp_proxy or self.agent

    def allowed_origins(self, cors_origins: str) -> str:
        """``--cors-origins``; ``localhost`` in place of the default ``*`` when tools are on, as llama-server does
        (it keeps a ``*`` given on the command line; here a ``*`` with tools needs a list such as ``http://*``)."""
        return "localhost" if self.serves_tools and cors_origins == "*" else cors_origins
