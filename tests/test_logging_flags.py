"""llama-server's logging flags, run as a real process: where the lines go, what each one shows, which levels."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from lfmserve.router.child import child_argv
from lfmserve.settings import Settings
from lfmserve.testing import free_port, llama_server_weight_flags
from tests.conftest import Running, wait_healthy
from tests.test_cli import LFMSERVE

TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
#: A text line as lfmserve writes it by default: time, level, logger, message.
LINE = re.compile(rf"{TIME} (DEBUG|TRACE|INFO|WARNING|ERROR|CRITICAL) ([\w.]+): .*")


def _serve(running: list[Running], model: Path, *flags: str) -> Running:
    """``lfmserve`` on the tiny model with ``flags``, healthy; stop it for what it printed (stdout and stderr)."""
    assert LFMSERVE is not None
    # Weights placed explicitly where llama.cpp has AMX: otherwise a clean start there says it does not repack.
    server = Running(
        [LFMSERVE, "-m", str(model), "-c", "512", "-np", "1", "-t", "1", *llama_server_weight_flags(), *flags]
    )
    running.append(server)
    wait_healthy(server.url, server.process)
    return server


def _listening(server: Running, model: Path) -> str:
    return re.escape(f"listening on {server.url} (model {model})")


def test_log_file_gets_every_line_stderr_too(running: list[Running], tiny_gguf: Path, tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    log_file.write_text("from before\n")
    server = _serve(running, tiny_gguf, "--log-file", str(log_file))
    printed = server.stop()
    lines = log_file.read_text().splitlines()
    assert log_file.read_text() == printed  # llama-server writes each line to both, the file emptied first
    assert [line for line in lines if not LINE.fullmatch(line)] == []
    listening = re.compile(rf"{TIME} INFO lfmserve: {_listening(server, tiny_gguf)}")
    assert len([line for line in lines if listening.fullmatch(line)]) == 1


def test_log_disable_silences_everything_log_file_and_verbose_included(
    running: list[Running], tiny_gguf: Path, tmp_path: Path
) -> None:
    log_file = tmp_path / "server.log"
    server = _serve(running, tiny_gguf, "--log-disable", "-v", "--log-file", str(log_file))
    assert server.stop() == ""
    assert not log_file.exists()


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        ([], rf"{TIME} INFO lfmserve: LISTENING"),
        pytest.param(["--log-colors", "off"], rf"{TIME} INFO lfmserve: LISTENING", marks=pytest.mark.slow),
        (["--no-log-timestamps"], r"INFO lfmserve: LISTENING"),
        # the time is part of the prefix, as in llama-server
        pytest.param(["--no-log-prefix", "--log-timestamps"], "LISTENING", marks=pytest.mark.slow),
        (["--log-colors", "on"], rf"\x1b\[34m{TIME}\x1b\[0m \x1b\[32mINFO\x1b\[0m lfmserve: LISTENING"),
    ],
    ids=["default", "colors-off", "no-timestamps", "no-prefix", "colors-on"],
)
def test_the_prefix_timestamps_and_colors_of_a_line(
    running: list[Running], tiny_gguf: Path, flags: list[str], line: str
) -> None:
    server = _serve(running, tiny_gguf, *flags)
    printed = server.stop()
    pattern = re.compile(line.replace("LISTENING", _listening(server, tiny_gguf)))
    assert len([text for text in printed.splitlines() if pattern.fullmatch(text)]) == 1
    if "on" not in flags:
        assert "\x1b" not in printed  # auto: off, the output being a file and not a terminal
    if not flags:
        assert [text for text in printed.splitlines() if not LINE.fullmatch(text)] == []


@pytest.mark.parametrize(
    ("flags", "levels"),
    [
        (["-lv", "2"], set()),  # warnings and errors only: a clean start has none
        (["--log-verbosity", "4"], {"INFO", "TRACE"}),  # llama.cpp's own info lines, no debug
        pytest.param(["--verbosity", "5"], {"INFO", "TRACE", "DEBUG"}, marks=pytest.mark.slow),
        (["-lv", "2", "-v"], {"INFO", "TRACE", "DEBUG"}),  # -v: everything
    ],
)
def test_verbosity_chooses_the_levels_logged(
    running: list[Running], tiny_gguf: Path, flags: list[str], levels: set[str]
) -> None:
    printed = _serve(running, tiny_gguf, *flags).stop()
    matches = [LINE.fullmatch(text) for text in printed.splitlines()]
    assert None not in matches
    assert {match[1] for match in matches if match} == levels
    trace = {match[2] for match in matches if match and match[1] == "TRACE"}
    assert trace == ({"lfmserve.llama_cpp"} if "TRACE" in levels else set())  # llama.cpp's own info lines


def test_log_jsonl_writes_one_object_per_line_to_stdout(tiny_gguf: Path, tmp_path: Path) -> None:
    assert LFMSERVE is not None
    port = free_port()
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    started_us = time.time_ns() // 1000
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [LFMSERVE, "-m", str(tiny_gguf), "-c", "512", "-np", "1", "--log-jsonl", "--port", str(port)]
            + list(llama_server_weight_flags()),
            stdout=stdout,
            stderr=stderr,
        )
        try:
            wait_healthy(f"http://127.0.0.1:{port}", process)
        finally:
            process.terminate()
            process.wait(timeout=30)
    stopped_us = time.time_ns() // 1000
    assert err.read_text() == ""
    entries = [json.loads(line) for line in out.read_text().splitlines()]
    assert [entry for entry in entries if list(entry) != ["type", "time", "level", "logger", "msg"]] == []
    assert {(entry["type"], entry["level"]) for entry in entries} == {("log", "info")}
    assert all(started_us <= entry["time"] <= stopped_us for entry in entries)
    listening = f"listening on http://127.0.0.1:{port} (model {tiny_gguf})"
    assert [entry["msg"] for entry in entries if entry["logger"] == "lfmserve"][0] == listening


def test_an_unwritable_log_file_fails_with_one_line(tiny_gguf: Path, tmp_path: Path) -> None:
    assert LFMSERVE is not None
    missing = tmp_path / "no-such-folder" / "server.log"
    result = subprocess.run(
        [LFMSERVE, "-m", str(tiny_gguf), "--log-file", str(missing), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (
        1,
        f"lfmserve: error: --log-file {missing}: No such file or directory\n",
    )


def test_a_router_writes_its_own_lines_to_the_log_file_and_its_childrens_to_stderr_only(
    running: list[Running], tiny_gguf: Path, tmp_path: Path
) -> None:
    assert LFMSERVE is not None
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.gguf").symlink_to(tiny_gguf)
    log_file = tmp_path / "router.log"
    flags = ["--models-dir", str(tmp_path / "models"), "-t", "1", "-np", "1", "-c", "512", "--log-file", str(log_file)]
    router = Running([LFMSERVE, *flags], env={"HF_HUB_CACHE": str(tmp_path / "hf-cache")})
    running.append(router)
    wait_healthy(router.url, router.process)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}
    assert httpx.post(router.url + "/v1/chat/completions", json=body, timeout=120).status_code == 200
    printed = router.stop().splitlines()
    own = log_file.read_text().splitlines()
    child = re.compile(rf"{TIME} INFO \[tiny\] lfmserve: listening on http://127\.0\.0\.1:\d+ \(model .*tiny\.gguf\)")
    assert len([line for line in printed if child.fullmatch(line)]) == 1
    assert [line for line in own if "[tiny]" in line] == []
    assert [line for line in own if line not in printed] == []


def test_a_router_child_gets_the_logging_flags_but_not_the_log_file() -> None:
    settings = Settings.of(model="m.gguf", log_file="router.log", log_verbosity=4, log_jsonl=True, log_prefix=False)
    argv = child_argv(settings, "m", 8081)
    assert "--log-file" not in argv
    assert argv[argv.index("--log-verbosity") :][:2] == ["--log-verbosity", "4"]
    assert "--log-jsonl" in argv and "--no-log-prefix" in argv
