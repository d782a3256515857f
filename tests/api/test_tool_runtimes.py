"""``--tools-runtime`` and ``x-tool-runtime``: the tools run in a container or over ssh, over real HTTP, through
fake ``docker``, ``podman`` and ``ssh`` programs first on PATH. Each records its argv and runs the command it was
given on this machine, in a folder standing for the container or the remote home, so every tool's commands are
compared with llama-server's, word for word, and its answers with the same call's on this machine."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.api.app import create_app
from lfmserve.errors import LfmError
from lfmserve.settings import Settings
from tests.conftest import ServerThread, serve

#: The fake: ``ssh ... TARGET 'WORDS'`` runs ``sh -c 'WORDS'`` (a remote shell re-parses them); ``ENGINE exec [-i]
#: ID ARGV...`` runs ARGV; ``ENGINE run ... --cidfile FILE IMAGE sh`` writes an id to FILE, then stands for the
#: container's shell until its stdin closes (image ``missing``: exits 125 as an engine does).
FAKE = """#!{python}
import json, os, subprocess, sys
log, box = {log!r}, {box!r}
name, args = os.path.basename(sys.argv[0]), sys.argv[1:]

def record(*words):
    with open(log, "a") as file:
        file.write(json.dumps([name, *words]) + "\\n")

record(*args)
if name == "ssh":
    sys.exit(subprocess.call(["sh", "-c", args[-1]], cwd=box))
if args[0] == "exec":
    words = args[2:] if args[1] == "-i" else args[1:]
    sys.exit(subprocess.call(words[1:], cwd=box))
if args[-2] == "missing":
    sys.exit(125)
container = f"c{{os.getpid()}}"
record("started", container, str(os.getpid()))  # before the id is out: the server may go on at once
with open(args[args.index("--cidfile") + 1], "w") as file:
    file.write(container + "\\n")
sys.stdin.read()
record("stopped", container)
"""

SSH = ["ssh", "-o", "BatchMode=yes", "-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no"]
SSH += ["-o", "StrictHostKeyChecking=yes"]
SIZE = 'wc -c < "$1"'
WRITE = 'mkdir -p "$(dirname "$1")" && cat > "$1"'
GIT = 'cd "$1" && git ls-files --cached --others --exclude-standard'
JUNK = (
    "\\( -name .git -o -name .svn -o -name .hg -o -name node_modules -o -name __pycache__ -o -name .venv -o -name venv "
    "-o -name dist -o -name build -o -name target -o -name .cache -o -name .idea -o -name .vscode \\) -prune"
)
FIND_FILES = f'cd "$1" && find . -mindepth 1 {JUNK} -o -type f -print'
FIND_DIRS = f'cd "$1" && find . -mindepth 1 {JUNK} -print -o -type d -print'
CD = 'cd "$1" || exit 127; shift; exec "$@"'


@dataclass(frozen=True, slots=True)
class Fakes:
    bin: Path
    log: Path
    box: Path  # the container's folder, the remote home

    def commands(self) -> list[list[str]]:
        """The programs run since the last look, each as its name and argv."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        self.log.write_text("")
        return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fakes]:
    folder = tmp_path_factory.mktemp("fakes")
    fakes = Fakes(folder / "bin", folder / "log.jsonl", folder / "box")
    fakes.bin.mkdir()
    fakes.box.mkdir()
    for name in ("docker", "podman", "ssh"):
        program = fakes.bin / name
        program.write_text(FAKE.format(python=sys.executable, log=str(fakes.log), box=str(fakes.box)))
        program.chmod(0o755)
    with pytest.MonkeyPatch.context() as patch:  # the servers run in this process: they see this PATH
        patch.setenv("PATH", f"{fakes.bin}{os.pathsep}{os.environ['PATH']}")
        yield fakes


@pytest.fixture(scope="module")
def server(server_factory: Callable[..., ServerThread], tiny_gguf: Path, fakes: Fakes) -> ServerThread:
    return server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1, tools="all"))


def answer(server: ServerThread, tool: str, headers: dict[str, str] | None = None, **params: Any) -> Any:
    response = httpx.post(server.url + "/tools", json={"tool": tool, "params": params}, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def through(
    server: ServerThread, fakes: Fakes, runtime: str, tool: str, cwd: str = "", **params: Any
) -> tuple[Any, list[list[str]]]:
    """The call's answer through ``runtime`` and the commands it ran; the same call on this machine answers the
    same (but ``get_info``, whose folder is the isolate's, and ``edit_file``, which the first call has done)."""
    fakes.commands()
    headers = {"x-tool-runtime": runtime, **({"x-tool-cwd": cwd} if cwd else {})}
    isolated = answer(server, tool, headers, **params)
    commands = fakes.commands()
    if tool not in ("get_info", "edit_file"):
        assert isolated == answer(server, tool, {"x-tool-cwd": cwd} if cwd else {}, **params)
    return isolated, commands


def test_each_tool_runs_llama_servers_commands_in_a_container(
    server: ServerThread, fakes: Fakes, tmp_path: Path
) -> None:
    box, folder, path = ["docker", "exec", "box"], str(tmp_path), f"{tmp_path}/new/t.txt"
    written, ran = through(server, fakes, "docker-container:box", "write_file", path=path, content="a\nb\n")
    assert (written["bytes"], ran) == (4, [["docker", "exec", "-i", "box", "sh", "-c", WRITE, "_", path]])
    read, ran = through(server, fakes, "docker-container:box", "read_file", folder, path="new/t.txt")
    assert read == {"plain_text_response": "a\nb\n"}
    assert ran == [[*box, "sh", "-c", SIZE, "_", path], [*box, "cat", "--", path]]
    edits = [{"old_text": "b", "new_text": "c"}]
    edited, ran = through(server, fakes, "docker-container:box", "edit_file", path=path, edits=edits)
    assert edited == {"result": "file edited successfully", "path": path, "edits_applied": 1}
    assert ran == [[*box, "cat", "--", path], ["docker", "exec", "-i", "box", "sh", "-c", WRITE, "_", path]]
    assert Path(path).read_text() == "a\nc\n"
    found, ran = through(server, fakes, "docker-container:box", "file_glob_search", path=folder, type="all")
    assert found["plain_text_response"] == "new/\nnew/t.txt\n\n---\nTotal matches: 2\n"
    assert ran == [[*box, "sh", "-c", '[ -d "$1" ]', "_", folder], [*box, "sh", "-c", FIND_DIRS, "_", folder],
                   [*box, "sh", "-c", FIND_FILES, "_", folder]]  # fmt: skip
    grep, ran = through(server, fakes, "docker-container:box", "grep_search", path=folder, pattern="c")
    assert grep == {"plain_text_response": "new/t.txt:c\n\n---\nTotal matches: 1\n"}
    assert ran == [
        [*box, "sh", "-c", '[ -f "$1" ]', "_", folder], [*box, "sh", "-c", '[ -d "$1" ]', "_", folder],
        [*box, "sh", "-c", '[ -d "$1" ]', "_", folder], [*box, "sh", "-c", GIT, "_", folder],
        [*box, "sh", "-c", FIND_FILES, "_", folder], [*box, "cat", "--", path],
    ]  # fmt: skip
    shell, ran = through(server, fakes, "docker-container:box", "exec_shell_command", folder, command="pwd; exit 3")
    assert shell == {"plain_text_response": f"{folder}\n\n[exit code: 3]"}
    inner = ["timeout", "10s", "sh", "-c", "pwd; exit 3"]
    assert ran == [["docker", "exec", "-i", "box", "sh", "-c", CD, "_", folder, *inner]]


def test_get_info_and_a_stream_run_in_the_container(server: ServerThread, fakes: Fakes) -> None:
    info, ran = through(server, fakes, "podman-container:box", "get_info")
    assert info == {"os": answer(server, "get_info")["os"], "cwd": str(fakes.box)}
    assert ran == [["podman", "exec", "-i", "box", "timeout", "5s", "uname", "-a"],
                   ["podman", "exec", "-i", "box", "timeout", "5s", "pwd"]]  # fmt: skip
    body = {"tool": "exec_shell_command", "params": {"command": "echo hello", "timeout": 3}, "stream": True}
    with httpx.stream(
        "POST", server.url + "/tools", json=body, headers={"x-tool-runtime": "docker-container:box"}
    ) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert events == [{"chunk": "hello\n"}, {"chunk": "\n[exit code: 0]"}, {"done": True}]
    assert fakes.commands() == [["docker", "exec", "-i", "box", "timeout", "3s", "sh", "-c", "echo hello"]]


def test_ssh_sends_the_command_as_one_quoted_word(server: ServerThread, fakes: Fakes, tmp_path: Path) -> None:
    path = f"{tmp_path}/it's here.txt"
    quoted = f"'{tmp_path}/it'\\''s here.txt'"
    written, ran = through(server, fakes, "ssh:me@host", "write_file", path=path, content="x\n")
    assert ran == [[*SSH, "me@host", f"'sh' '-c' '{WRITE}' '_' {quoted}"]]  # stdin carries the content: no -n
    read, ran = through(server, fakes, "ssh:me@host", "read_file", path=path)
    assert read == {"plain_text_response": "x\n"}
    assert ran == [
        [*SSH, "-n", "me@host", f"'sh' '-c' '{SIZE}' '_' {quoted}"],
        [*SSH, "-n", "me@host", f"'cat' '--' {quoted}"],
    ]
    shell, ran = through(server, fakes, "ssh:me@host", "exec_shell_command", command="echo 'a b'")
    assert shell == {"plain_text_response": "a b\n\n[exit code: 0]"}
    assert ran == [[*SSH, "me@host", "'timeout' '10s' 'sh' '-c' 'echo '\\''a b'\\'''"]]


def test_a_runtime_that_cannot_be_used_is_refused_and_nothing_runs(
    server: ServerThread, fakes: Fakes, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pwned = "-oProxyCommand=touch /tmp/pwned"
    refusals = {
        f"ssh:{pwned}": f"invalid ssh target: {pwned}",
        "ssh:": "invalid ssh target: ",
        "docker-container:--privileged": "invalid container id: --privileged",
        "podman-container:a b": "invalid container id: a b",
        "docker:alpine": "tool runtime must name a running container: docker:alpine",
        "lxc:box": "unknown tool runtime: lxc:box",
    }
    fakes.commands()
    for runtime, message in refusals.items():
        response = httpx.post(server.url + "/tools", json={"tool": "get_info"}, headers={"x-tool-runtime": runtime})
        assert (response.status_code, response.json()) == (
            500,
            {"code": 500, "message": message, "type": "server_error"},
        )
    assert fakes.commands() == []
    monkeypatch.setenv("PATH", str(tmp_path))
    response = httpx.post(server.url + "/tools", json={"tool": "get_info"}, headers={"x-tool-runtime": "ssh:host"})
    assert (response.status_code, response.json()["message"]) == (
        500,
        "tool runtime ssh:host: ssh was not found on PATH",
    )


def test_an_owned_container_is_spawned_respawned_and_removed(tiny_gguf: Path, fakes: Fakes) -> None:
    settings = Settings.of(
        model=str(tiny_gguf),
        ctx_size=512,
        parallel=1,
        threads=1,
        tools="exec_shell_command",
        tools_runtime="docker:alpine",
    )
    fakes.commands()
    server, second = serve(settings), ""
    try:
        server.wait_ready()
        spawn, started = fakes.commands()
        assert spawn[:5] == ["docker", "run", "--rm", "-i", "--cidfile"] and spawn[6:] == ["alpine", "sh"]
        assert started[1] == "started" and not os.path.exists(spawn[5])  # the cid file is read, then removed
        first, pid = started[2], int(started[3])
        answer(server, "exec_shell_command", command="true", timeout=2)
        assert fakes.commands() == [["docker", "exec", "-i", first, "timeout", "2s", "sh", "-c", "true"]]
        answer(server, "exec_shell_command", {"x-tool-runtime": "ssh:me@host"}, command="true", timeout=2)
        assert fakes.commands() == [[*SSH, "me@host", "'timeout' '2s' 'sh' '-c' 'true'"]]  # the header wins
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":  # dead, not reaped yet: the server reaps it
            time.sleep(0.01)
        answer(server, "exec_shell_command", command="true", timeout=2)
        respawn, started, ran = fakes.commands()
        second = started[2]
        assert (respawn[6:], started[1], second != first) == (["alpine", "sh"], "started", True)
        assert ran == ["docker", "exec", "-i", second, "timeout", "2s", "sh", "-c", "true"]
    finally:
        server.stop()
    assert fakes.commands() == [["docker", "stopped", second]]


def test_a_runtime_is_checked_when_parsed_and_when_the_server_starts(
    tiny_gguf: Path, fakes: Fakes, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for argv, message in (
        (["--tools-runtime", "ssh:-oProxyCommand=x"], "invalid ssh target: -oProxyCommand=x"),
        (["--tools-runtime", "podman:"], "--tools-runtime podman:<image> requires an image name"),
        (
            ["--tools-runtime", "ssh:h", "--tools-root", "."],
            "--tools-root keeps the tools on this machine: it cannot be used with --tools-runtime",
        ),
    ):
        with pytest.raises(SystemExit) as exit_info:
            Settings.from_argv(argv, environ={})
        assert (exit_info.value.code, capsys.readouterr().err) == (1, f"lfmserve: error: {message} (see --help)\n")
    missing = Settings.of(model=str(tiny_gguf), tools="all", tools_runtime="docker:missing")
    with pytest.raises(
        LfmError,
        match=r"^failed to spawn docker container for tools runtime \(image: missing\): it exited with status 125$",
    ):
        create_app(missing, lambda: pytest.fail("not loaded"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no ssh: the start ends when the flags are read, before any load
    with pytest.raises(SystemExit) as exit_info:
        Settings.from_argv(["-m", str(tiny_gguf), "--tools", "all", "--tools-runtime", "ssh:me@host"], environ={})
    assert (exit_info.value.code, capsys.readouterr().err) == (
        1,
        "lfmserve: error: tool runtime ssh:me@host: ssh was not found on PATH (see --help)\n",
    )
