"""MCP servers' tools at ``/tools`` over real HTTP: a server written here with the ``mcp`` SDK (stdio) is listed
as ``<server>_<tool>`` and called; a call that crashes its server or runs past ``timeout_ms`` answers an error and
the next call works; a server that cannot start is skipped, and a name a built-in tool has is not taken."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.settings import Settings
from tests.conftest import ServerThread

SERVER = """
import os, time
from mcp.server.mcpserver import MCPServer

server = MCPServer("echo")

@server.tool()
def add(a: int, b: int) -> int:
    \"\"\"Add two numbers.\"\"\"
    return a + b

@server.tool()
def crash() -> str:
    \"\"\"Exit in the middle of the call.\"\"\"
    os._exit(3)

@server.tool()
def hang() -> str:
    \"\"\"Answer after a minute.\"\"\"
    time.sleep(60)
    return "late"

@server.tool()
def fail() -> str:
    \"\"\"Fail as a tool does.\"\"\"
    raise ValueError("no such thing")

@server.tool()
def file() -> str:
    \"\"\"Named read_file once prefixed: a built-in's name.\"\"\"
    return "never listed"

server.run()
"""


@pytest.fixture(scope="module")
def server(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> ServerThread:
    script = tmp_path_factory.mktemp("mcp") / "echo_server.py"
    script.write_text(SERVER)
    # "read": its tool "file" would be the built-in read_file. A failing tool's traceback is rendered by the SDK
    # (rich) before it answers, which took over a second in a full run of the suite: the hang waits 5 s.
    servers = {
        "read": {"command": sys.executable, "args": [str(script)], "timeout_ms": 5000},
        "missing": {"command": "this_executable_does_not_exist_12345"},
    }
    settings = Settings.of(
        model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1, tools="read_file",
        mcp_servers_json=json.dumps({"mcpServers": servers}),
    )  # fmt: skip
    return server_factory(settings)


def call(server: ServerThread, tool: str, **params: Any) -> Any:
    response = httpx.post(server.url + "/tools", json={"tool": tool, "params": params}, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_each_servers_tools_are_listed_after_the_built_in_ones_under_their_servers_name(server: ServerThread) -> None:
    listed = httpx.get(server.url + "/tools").json()
    assert [entry["tool"] for entry in listed] == [
        "read_file", "read_add", "read_crash", "read_hang", "read_fail",
    ]  # fmt: skip
    add = listed[1]
    assert {key: add[key] for key in ("display_name", "type", "permissions", "uses_cwd")} == {
        "display_name": "read_add",
        "type": "mcp",
        "permissions": {"write": False},
        "uses_cwd": False,
    }
    function = add["definition"]["function"]
    assert (function["name"], function["description"]) == ("read_add", "Add two numbers.")
    assert function["parameters"]["required"] == ["a", "b"]
    assert function["parameters"]["properties"]["a"]["type"] == "integer"


def test_a_tool_is_called_and_a_crash_or_a_hang_answers_an_error_the_next_call_does_not_see(
    server: ServerThread,
) -> None:
    assert call(server, "read_add", a=3, b=5) == {"plain_text_response": "8"}
    assert call(server, "read_fail") == {"error": "Error executing tool fail"}  # the tool's own failure
    assert call(server, "read_crash") == {"error": "MCP server unavailable: read"}
    assert call(server, "read_hang") == {"error": "MCP tool call timed out after 5000 ms"}
    assert call(server, "read_add", a=1, b=2) == {"plain_text_response": "3"}
    assert call(server, "read_file", path=__file__)["plain_text_response"].startswith('"""MCP servers')
    refused = httpx.post(server.url + "/tools", json={"tool": "missing_x"}, timeout=30)
    assert refused.status_code == 404 and refused.json()["message"] == 'unknown tool "missing_x"'


def test_a_config_that_is_not_mcp_servers_stops_the_start_with_llama_servers_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        Settings.from_argv(["--mcp-servers-json", '{"servers": {}}'], environ={})
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.startswith("lfmserve: error: failed to parse MCP config JSON: ")
