"""The command line, run as a real process: flags, errors, serving."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from lfmserve.testing import TinyProjector, free_port, write_mmproj_gguf
from tests.conftest import LFMSERVE, STATE_TIMEOUT_S, Running, wait_healthy, wait_until


def test_serves_a_local_model_with_llama_server_flags(running: list[Running], tiny_gguf: Path) -> None:
    assert LFMSERVE is not None
    server = Running(
        [
            LFMSERVE,
            "-m",
            str(tiny_gguf),
            "-c",
            "1024",
            "-np",
            "2",
            "-t",
            "2",
            "-a",
            "my-lfm",
            "--jinja",
            "--temp",
            "0",
            "-n",
            "5",
        ]
    )
    running.append(server)
    wait_healthy(server.url, server.process)
    models = httpx.get(server.url + "/v1/models").json()
    assert models["data"][0]["id"] == "my-lfm" and models["data"][0]["aliases"] == ["my-lfm"]
    props = httpx.get(server.url + "/props").json()
    assert props["total_slots"] == 2 and props["default_generation_settings"]["n_ctx"] == 512  # -c / -np
    assert props["default_generation_settings"]["params"]["temperature"] == 0.0
    chat = httpx.post(
        server.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}]}, timeout=30
    ).json()
    assert chat["model"] == "my-lfm" and chat["usage"]["completion_tokens"] == 5  # -n is the default max_tokens
    log = server.stop()
    assert "temperature = 0.0 (command line)" in log and "LFM family: LFM2 text" in log


def test_python_dash_m_is_the_same_cli(running: list[Running], tiny_gguf: Path) -> None:
    assert LFMSERVE is not None
    helps = [
        subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=60).stdout
        for argv in ([LFMSERVE], [sys.executable, "-m", "lfmserve"])
    ]
    assert helps[0] == helps[1] and "--hf-repo" in helps[0] and "--ctx-size" in helps[0]
    server = Running([sys.executable, "-m", "lfmserve", "-m", str(tiny_gguf), "-c", "512", "-np", "1"])
    running.append(server)
    wait_healthy(server.url, server.process)
    assert httpx.get(server.url + "/v1/models").json()["data"][0]["id"] == tiny_gguf.name


def test_llama_cpps_config_file_ranks_under_the_environment_and_the_command_line(
    running: list[Running], tiny_gguf: Path, tmp_path: Path
) -> None:
    assert LFMSERVE is not None
    config = tmp_path / "llama.cpp" / "config.ini"
    config.parent.mkdir()
    config.write_text("ctx-size = 3072\nparallel = 3\nnot-an-option = 1\n")
    server = Running(
        [LFMSERVE, "-m", str(tiny_gguf), "-c", "2048", "-t", "1"],
        env={"XDG_CONFIG_HOME": str(tmp_path), "LLAMA_ARG_N_PARALLEL": "2"},
    )
    running.append(server)
    wait_healthy(server.url, server.process)
    props = httpx.get(server.url + "/props").json()
    assert (props["total_slots"], props["default_generation_settings"]["n_ctx"]) == (2, 1024)  # -c 2048 / 2 slots
    log = server.stop()
    assert log.startswith(
        f"using config file: {config}\nignoring option 'not-an-option' from {config}: not supported by this program\n"
    )


def test_a_malformed_config_file_stops_the_start_with_llama_cpps_line(tmp_path: Path) -> None:
    assert LFMSERVE is not None
    config = tmp_path / "llama.cpp" / "config.ini"
    config.parent.mkdir()
    config.write_text("ctx-size 3072\n")
    result = subprocess.run(
        [LFMSERVE, "-m", "never-read.gguf"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)},
    )
    assert (result.returncode, result.stderr) == (
        1,
        f"using config file: {config}\nlfmserve: error: failed to parse server config file: {config}\n",
    )


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--no-such-flag"], 1, "lfmserve: error: unrecognized arguments: --no-such-flag (see --help)"),
        (["-m", "/nonexistent/model.gguf"], 1, "lfmserve: error: model file not found: /nonexistent/model.gguf"),
        (["-c", "many"], 1, "lfmserve: error: argument -c/--ctx-size: invalid int value: 'many' (see --help)"),
    ],
)
def test_bad_command_lines_exit_non_zero_with_one_line(argv: list[str], code: int, message: str) -> None:
    assert LFMSERVE is not None
    result = subprocess.run([LFMSERVE, *argv], capture_output=True, text=True, timeout=60)
    assert result.returncode == code
    assert result.stderr == message + "\n"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"not a gguf at all", "invalid magic characters: 'not ', expected 'GGUF'"),
        (
            None,
            "tensor 'blk.0.shortconv.out_proj.weight' data is not within the file bounds,"
            " model is corrupted or incomplete",
        ),
    ],
    ids=["text", "truncated"],
)
def test_a_file_that_is_not_a_model_fails_with_one_line_that_gives_the_reason(
    tmp_path: Path, tiny_gguf: Path, content: bytes | None, reason: str
) -> None:
    assert LFMSERVE is not None
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(content if content is not None else tiny_gguf.read_bytes()[:300_000])
    result = subprocess.run(
        [LFMSERVE, "-m", str(junk), "--port", str(free_port())], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[-1] == f"lfmserve: error: failed to load model from {junk}: {reason}"
    assert [line for line in lines if "ERROR" in line or "error" in line] == [lines[-1]]  # llama.cpp's lines folded in


def test_a_directory_or_an_empty_file_is_refused_before_serving(tmp_path: Path) -> None:
    assert LFMSERVE is not None
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    for path, message in (
        (tmp_path, f"lfmserve: error: model path is a directory, not a GGUF file: {tmp_path}"),
        (empty, f"lfmserve: error: model file is empty: {empty}"),
    ):
        result = subprocess.run([LFMSERVE, "-m", str(path)], capture_output=True, text=True, timeout=60)
        assert (result.returncode, result.stderr) == (1, message + "\n")


@pytest.mark.slow  # about 7 s: a real process drained under load
def test_sigterm_lets_running_requests_finish_then_ends_the_rest_and_exits_0(tiny_llama_gguf: Path) -> None:
    """Four requests run when SIGTERM arrives: the one that can finish within the grace does, with [DONE];
    the endless ones end with a 503 (an error event in a stream, the error body otherwise); exit 0, no traceback.

    The endless ones are endless whatever the machine's speed (context shift, ``ignore_eos``, no max_tokens); the
    short one's 32 tokens have the grace's 5 s, and the test passes whether it finishes before SIGTERM or after.
    """
    assert LFMSERVE is not None
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [LFMSERVE, "-m", str(tiny_llama_gguf), "-c", "2048", "-np", "4", "-t", "2", "--context-shift"]
    process = subprocess.Popen(
        [*argv, "--shutdown-timeout", "5", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_healthy(url, process, timeout_s=STATE_TIMEOUT_S)
        results: dict[str, list[str]] = {}
        streaming = {name: threading.Event() for name in ("endless one", "endless two", "short")}
        # Reads wait as long as the server runs: the process is killed below if the test fails first.
        timeout = httpx.Timeout(STATE_TIMEOUT_S, read=None)

        def stream(name: str, limit: dict[str, int]) -> None:
            body = {"messages": [{"role": "user", "content": name}], "ignore_eos": True, "stream": True, **limit}
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=timeout) as r:
                lines = results.setdefault(name, [])
                for line in r.iter_lines():
                    if line:
                        lines.append(line)
                        streaming[name].set()

        def whole(name: str) -> None:
            body = {"messages": [{"role": "user", "content": name}], "ignore_eos": True}
            response = httpx.post(url + "/v1/chat/completions", json=body, timeout=timeout)
            results[name] = [str(response.status_code), response.text]

        endless = [
            threading.Thread(target=stream, args=("endless one", {})),
            threading.Thread(target=stream, args=("endless two", {})),
            threading.Thread(target=whole, args=("whole",)),
        ]
        for client in endless:
            client.start()
        # The three endless ones are generating (a stream not yet begun would end with a 503 body instead of an
        # error event), then the short one is.
        for name in ("endless one", "endless two"):
            assert streaming[name].wait(timeout=STATE_TIMEOUT_S)
        wait_until(lambda: n_processing(url) == 3, "the three endless requests are generating")
        short = threading.Thread(target=stream, args=("short", {"max_tokens": 32}))
        short.start()
        assert streaming["short"].wait(timeout=STATE_TIMEOUT_S)
        process.send_signal(signal.SIGTERM)
        for client in [*endless, short]:
            client.join(timeout=STATE_TIMEOUT_S)
        _, stderr = process.communicate(timeout=STATE_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
    shutting_down = {"error": {"code": 503, "message": "the server is shutting down", "type": "unavailable_error"}}
    assert process.returncode == 0 and "Traceback" not in stderr.decode() and "ERROR" not in stderr.decode()
    for name in ("endless one", "endless two"):
        assert results[name][-1] == "error: " + json.dumps(shutting_down)
    assert results["whole"] == ["503", json.dumps(shutting_down, separators=(",", ":"))]
    finish = json.loads(results["short"][-2].removeprefix("data: "))
    assert results["short"][-1] == "data: [DONE]" and finish["choices"][0]["finish_reason"] == "length"


def n_processing(url: str) -> int:
    return sum(slot["is_processing"] for slot in httpx.get(url + "/slots").json())


def test_a_projector_for_another_text_width_fails_with_one_line(tmp_path: Path, vl_gguf: Path) -> None:
    assert LFMSERVE is not None
    narrow = write_mmproj_gguf(tmp_path / "mmproj-32.gguf", TinyProjector(kind="vision", n_embd_text=32))
    result = subprocess.run(
        [LFMSERVE, "-m", str(vl_gguf), "--mmproj", str(narrow), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[-1] == (
        f"lfmserve: error: failed to load the multimodal projector {narrow}: "
        "mismatch between text model (n_embd = 64) and mmproj (n_embd = 32)"
    )
    assert [line for line in lines if "ERROR" in line or "error" in line] == [lines[-1]]


def test_a_missing_projector_file_is_refused_before_loading(tmp_path: Path, vl_gguf: Path) -> None:
    assert LFMSERVE is not None
    missing = tmp_path / "mmproj.gguf"
    result = subprocess.run([LFMSERVE, "-m", str(vl_gguf), "--mmproj", str(missing)], capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (1, f"lfmserve: error: projector file not found: {missing}\n")


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="IPv6 loopback is unavailable")
def test_every_host_address_is_served_with_llama_servers_header_names(running: list[Running], tiny_gguf: Path) -> None:
    assert LFMSERVE is not None
    server = Running([LFMSERVE, "-m", str(tiny_gguf), "-c", "512", "-np", "1", "-t", "1", "--host", "127.0.0.1, ::1"])
    running.append(server)
    wait_healthy(server.url, server.process)
    for url in (server.url, f"http://[::1]:{server.port}"):
        completion = httpx.post(url + "/completion", json={"prompt": "Hi", "n_predict": 2}, timeout=30)
        assert completion.status_code == 200 and completion.json()["tokens_predicted"] == 2
        preflight = httpx.options(url + "/completion", headers={"Origin": "http://localhost"})
        names = [name for name, _ in preflight.headers.raw if name.startswith(b"Access-")]
        assert names == [  # spelt as llama-server spells them, for clients that read them into a plain dict
            b"Access-Control-Allow-Origin",
            b"Access-Control-Allow-Credentials",
            b"Access-Control-Allow-Methods",
            b"Access-Control-Allow-Headers",
        ]
    assert f"listening on http://127.0.0.1:{server.port}, http://[::1]:{server.port}" in server.stop()


@pytest.mark.parametrize(
    ("hosts", "port", "message"),
    [
        ("127.0.0.1,::1", "0", "lfmserve: error: --port 0 is not supported with multiple TCP addresses"),
        (" , ", "8080", "lfmserve: error: --host requires at least one address"),
    ],
)
def test_bad_host_lists_fail_before_loading(tiny_gguf: Path, hosts: str, port: str, message: str) -> None:
    assert LFMSERVE is not None
    argv = [LFMSERVE, "-m", str(tiny_gguf), "--host", hosts, "--port", port]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (1, message + "\n")


def test_a_port_in_use_fails_with_one_line_before_loading(tiny_gguf: Path) -> None:
    assert LFMSERVE is not None
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [LFMSERVE, "-m", str(tiny_gguf), "--host", "127.0.0.1", "--port", str(port)]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr == (
        f"lfmserve: error: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: {port}: "
        "[Errno 98] Address already in use\n"
    )


def test_list_devices_prints_llama_servers_list_then_the_cpu_and_exits_0() -> None:
    assert LFMSERVE is not None
    result = subprocess.run([LFMSERVE, "--list-devices", "-m", "never-read.gguf"], capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    heading = lines.index("CPU devices (always used; -dev takes the devices above):")
    assert lines[0] == "Available devices:" and heading >= 2
    assert [
        re.fullmatch(r"  CPU: .+ \(\d+ MiB, \d+ MiB free\)", line) is not None for line in lines[heading + 1 :]
    ] == [True]
    if lines[1] == "  (none)":  # a CPU build: llama-server's list is empty
        assert heading == 2


def test_a_device_this_build_lacks_fails_with_llama_servers_message_before_loading(tiny_gguf: Path) -> None:
    assert LFMSERVE is not None
    argv = [LFMSERVE, "-m", str(tiny_gguf), "-dev", "NoSuchGPU0", "--port", str(free_port())]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (1, "lfmserve: error: -dev: invalid device: NoSuchGPU0\n")
