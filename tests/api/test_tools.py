"""``--tools``: llama-server's built-in tools at ``/tools`` over real HTTP, each on a temporary folder, with its
answers, limits and messages; ``--tools-root`` (lfmserve's) refusing the paths that lead out of its folder, and
any runtime. The tools in a container or over ssh: tests/api/test_tool_runtimes.py."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.settings import Settings
from lfmserve.tools.catalog import NAMES
from tests.conftest import ServerThread


@pytest.fixture(scope="module")
def server(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    return server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1, tools="all"))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("root")


@pytest.fixture(scope="module")
def rooted(server_factory: Callable[..., ServerThread], tiny_gguf: Path, root: Path) -> ServerThread:
    settings = Settings.of(
        model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1, tools="read_file,exec_shell_command",
        tools_root=str(root),
    )  # fmt: skip
    return server_factory(settings)


def call(server: ServerThread, tool: str, headers: dict[str, str] | None = None, **params: Any) -> Any:
    response = httpx.post(server.url + "/tools", json={"tool": tool, "params": params}, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_every_tool_is_listed_in_llama_servers_order_and_shape(server: ServerThread) -> None:
    listed = httpx.get(server.url + "/tools").json()
    assert [entry["tool"] for entry in listed] == list(NAMES)
    assert listed[4] == {
        "display_name": "Write file",
        "tool": "write_file",
        "type": "server",
        "permissions": {"write": True},
        "uses_cwd": True,
        "definition": {
            "type": "function",
            "function": {
                "name": "write_file",
                "description": "Write content to a file, creating it (including parent directories) if it does not "
                "exist. May use with edit_file for more complex edits.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "Path of the file to write"},
                        "content": {"type": "string", "description": "Content to write"},
                    },
                    "required": ["path", "content"],
                },
            },
        },
    }
    assert listed[6]["definition"]["function"]["parameters"] == {"type": "object", "properties": {}}


def test_a_file_is_written_read_and_edited(server: ServerThread, tmp_path: Path) -> None:
    path = str(tmp_path / "new" / "test.log")
    written = call(server, "write_file", path=path, content="line1\nline2\nline3\n")
    assert written == {"result": "file written successfully", "path": path, "bytes": 18}
    assert call(server, "read_file", path=path) == {"plain_text_response": "line1\nline2\nline3\n"}
    assert call(server, "read_file", path=path, start_line=2, end_line=3, append_loc=True) == {
        "plain_text_response": "2\u2192line2\n3\u2192line3\n"
    }
    edits = [{"old_text": "line2", "new_text": "line2-edited"}, {"old_text": "line3\n", "new_text": "line3\nline4\n"}]
    edited = call(server, "edit_file", path=path, edits=edits)
    assert edited == {"result": "file edited successfully", "path": path, "edits_applied": 2}
    assert Path(path).read_text() == "line1\nline2-edited\nline3\nline4\n"
    assert call(server, "edit_file", path=path, edits=[{"old_text": "line", "new_text": "x"}]) == {
        "error": f"found 4 occurrences of edits[0].old_text in {path}, it must be unique"
    }
    overlapping = [{"old_text": "line1\nline2", "new_text": "a"}, {"old_text": "line2-edited", "new_text": "b"}]
    assert call(server, "edit_file", path=path, edits=overlapping) == {
        "error": f"edits[0] and edits[1] overlap in {path}; merge them into one edit or target disjoint regions"
    }
    assert call(server, "edit_file", path=path, edits=[{"old_text": "line4", "new_text": "line4"}]) == {
        "error": "no changes made: the replacement(s) produced identical content"
    }
    assert call(server, "read_file", path=str(tmp_path / "missing")) == {
        "error": f"cannot stat file: {tmp_path}/missing"
    }


def test_an_edit_that_only_matches_once_quotes_and_blanks_are_plain_keeps_the_other_lines(
    server: ServerThread, tmp_path: Path
) -> None:
    path = tmp_path / "quotes.txt"
    path.write_text("keep \u201cthis\u201d  \nsay \u201chello\u201d\u00a0world\nend\n")
    edited = call(server, "edit_file", path=str(path), edits=[{"old_text": 'say "hello" world', "new_text": "hi"}])
    assert edited["edits_applied"] == 1
    assert path.read_text() == "keep \u201cthis\u201d  \nhi\nend\n"


def test_a_large_file_is_read_by_lines_or_as_base64(server: ServerThread, tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_text("".join(f"{n:09d}\n" for n in range(2000)))  # 20,000 bytes
    assert call(server, "read_file", path=str(path)) == {
        "error": "file too large (20000 bytes, max 16384). Use start_line/end_line to read a portion."
    }
    assert call(server, "read_file", path=str(path), start_line=1999, end_line=2000) == {
        "plain_text_response": "000001998\n000001999\n"
    }
    as_base64 = call(server, "read_file", {"x-resp-type": "base64"}, path=str(path))
    assert as_base64["size_bytes"] == 20000 and len(as_base64["base64"]) == 26668


def test_files_and_folders_are_found_by_glob(server: ServerThread, tmp_path: Path) -> None:
    (tmp_path / "project-alpha" / "src").mkdir(parents=True)
    (tmp_path / "project-alpha" / "README.md").write_text("alpha")
    (tmp_path / "project-alpha" / "src" / "main.cpp").write_text("int main() {}")
    (tmp_path / "project-beta" / "node_modules").mkdir(parents=True)
    (tmp_path / "project-beta" / "node_modules" / "junk.cpp").write_text("")
    found = call(server, "file_glob_search", path=str(tmp_path), include="*.cpp")
    assert found == {
        "plain_text_response": "project-alpha/src/main.cpp\n\n---\nTotal matches: 1\n",
        "entries": [{"path": "project-alpha/src/main.cpp", "type": "file"}],
        "base": str(tmp_path),
    }
    folders = call(server, "file_glob_search", path=str(tmp_path), type="dir")
    assert sorted(entry["path"] for entry in folders["entries"]) == [
        "project-alpha", "project-alpha/src", "project-beta", "project-beta/node_modules",
    ]  # fmt: skip
    limited = call(server, "file_glob_search", path=str(tmp_path), type="all", limit=1)
    assert limited["plain_text_response"].endswith(
        "\n---\nTotal matches: 6\n[1 results limit reached (6 total matches). Refine the glob pattern to narrow the "
        "search.]\n"
    )
    assert call(server, "file_glob_search", path=str(tmp_path), type="link") == {
        "error": 'invalid type: link (expected "file", "dir" or "all")'
    }


def test_grep_writes_llama_servers_lines(server: ServerThread, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo needle\nthree\n")
    (tmp_path / "b.md").write_text("needle\n")
    found = call(server, "grep_search", path=str(tmp_path), pattern="needle", include="*.txt", return_line_numbers=True)
    assert found == {"plain_text_response": "a.txt:2:two needle\n\n---\nTotal matches: 1\n"}
    context = call(
        server, "grep_search", path=str(tmp_path / "a.txt"), pattern="NEEDLE", ignore_case=True, context_lines=1
    )
    shown = f"{tmp_path}/a.txt"
    assert context["plain_text_response"] == (
        f"{shown}-1-one\n{shown}:2:two needle\n{shown}-3-three\n--\n\n---\nTotal matches: 1\n"
    )
    assert call(server, "grep_search", path=str(tmp_path), pattern="e.d", literal=True)["plain_text_response"] == (
        "\n---\nTotal matches: 0\n"
    )


def test_a_command_runs_in_the_callers_folder_and_its_output_streams(server: ServerThread, tmp_path: Path) -> None:
    cwd = {"x-tool-cwd": str(tmp_path)}
    ran = call(server, "exec_shell_command", cwd, command="echo hello > made.txt; cat made.txt; exit 3")
    assert ran == {"plain_text_response": "hello\n\n[exit code: 3]"}
    assert call(server, "read_file", cwd, path="made.txt") == {"plain_text_response": "hello\n"}
    body = {"tool": "exec_shell_command", "params": {"command": "echo hello"}, "stream": True}
    with httpx.stream("POST", server.url + "/tools", json=body, timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert events == [{"chunk": "hello\n"}, {"chunk": "\n[exit code: 0]"}, {"done": True}]


def test_a_command_past_its_timeout_is_killed_with_its_children_and_its_output_is_bounded(
    server: ServerThread,
) -> None:
    ran = call(server, "exec_shell_command", command="sleep 300 & echo $!; wait", timeout=1)["plain_text_response"]
    pid, ending = ran.split("\n", 1)
    assert ending == "\n[exit code: 1] [exit due to timed out]"
    assert not os.path.exists(f"/proc/{pid}") or Path(f"/proc/{pid}/stat").read_text().split()[2] in "ZX"
    bounded = call(server, "exec_shell_command", command="yes | head -c 100000", max_output_size=10)
    assert bounded == {"plain_text_response": "y\ny\ny\ny\ny\n\n[output truncated]\n[exit code: 0]"}


def test_a_call_the_server_cannot_make_is_refused_with_llama_servers_status_and_body(server: ServerThread) -> None:
    invalid = "invalid_request_error"
    refusals = [
        ({"tool": "nope"}, 404, 400, 'unknown tool "nope"'),
        ({"tool": "get_info", "stream": True}, 404, 400, 'tool "get_info" does not support stream = true'),
        ({"tool": "read_file"}, 400, 400, "[json.exception.out_of_range.403] key 'path' not found"),
    ]  # the runtimes' refusals: tests/api/test_tool_runtimes.py
    for body, status, code, message in refusals:
        response = httpx.post(server.url + "/tools", json=body, timeout=30)
        expected = {"code": code, "message": message, "type": invalid}
        assert (response.status_code, response.json()) == (status, expected), body


def test_with_tools_on_a_foreign_page_is_refused_by_cors(server: ServerThread) -> None:
    for origin, allowed in (("http://evil.example", None), ("http://localhost:5173", "http://localhost:5173")):
        preflight = httpx.options(
            server.url + "/tools", headers={"Origin": origin, "Access-Control-Request-Method": "POST"}
        )
        assert preflight.headers.get("access-control-allow-origin") == allowed, origin


def test_the_root_confines_every_path_and_the_commands_run_in_it(
    rooted: ServerThread, root: Path, tmp_path: Path
) -> None:
    (root / "inside.txt").write_text("in\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("out\n")
    (root / "link.txt").symlink_to(outside)
    assert call(rooted, "read_file", path="inside.txt") == {"plain_text_response": "in\n"}
    (root / "sub").mkdir()
    (root / "sub" / "deeper.txt").write_text("deeper\n")
    relative = {"x-tool-cwd": "sub"}  # a relative folder starts from the root
    assert call(rooted, "read_file", relative, path="deeper.txt") == {"plain_text_response": "deeper\n"}
    for path in ("../secret.txt", str(outside), "link.txt", f"{root}/../{tmp_path.name}/secret.txt"):
        answer = call(rooted, "read_file", path=path)
        assert answer["error"].endswith(f"is outside the tools root {root}"), path
    assert call(rooted, "exec_shell_command", command="pwd") == {"plain_text_response": f"{root}\n\n[exit code: 0]"}
    assert "error" in call(rooted, "exec_shell_command", {"x-tool-cwd": str(tmp_path)}, command="pwd")
    elsewhere = {"tool": "read_file", "params": {"path": "inside.txt"}}  # a container's paths are not the root's
    refused = httpx.post(rooted.url + "/tools", json=elsewhere, headers={"x-tool-runtime": "docker-container:box"})
    message = f"tool runtime docker-container:box: --tools-root keeps the tools on this machine, in {root}"
    assert (refused.status_code, refused.json()["message"]) == (500, message)
    assert [entry["tool"] for entry in httpx.get(rooted.url + "/tools").json()] == ["read_file", "exec_shell_command"]


def test_an_unknown_tool_name_stops_the_start_with_llama_servers_message(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        Settings.from_argv(["--tools", "read_file, grep_search"], environ={})  # blanks are not trimmed
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == (
        'lfmserve: error: unknown tool " grep_search". available tools: read_file, file_glob_search, grep_search, '
        "exec_shell_command, write_file, edit_file, get_info (see --help)\n"
    )
