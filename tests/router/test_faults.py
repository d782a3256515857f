"""What the router does when models fail: a model that cannot load, children killed outright while clients
stream, the router itself killed; and the limits that stop models: time-to-live and the memory budget."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Running
from tests.router.conftest import chat, child_pid, entries, start_router, wait_status

#: A GGUF header that says it holds -1 tensors: llama.cpp refuses it with a message of its own.
BROKEN_GGUF = b"GGUF" + (3).to_bytes(4, "little") + b"\xff" * 100


def test_a_model_that_cannot_load_fails_its_requests_and_the_others_keep_serving(
    running: list[Running], router_models: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(BROKEN_GGUF)
    preset = tmp_path / "preset.ini"
    preset.write_text(f"[broken]\nmodel = {broken}\n")
    router = start_router(running, router_models, preset=preset)
    failed = chat(router, "broken")
    assert failed.status_code == 500
    assert failed.json()["error"]["message"] == (
        f"model name=broken failed to load: failed to load model from {broken}: "
        "number of tensors is -1 but must be in [0, 53624256028225440]"
    )
    status = entries(router)["broken"]["status"]
    assert (status["value"], status["failed"], status["exit_code"]) == ("unloaded", True, 1)
    assert status["error"] == failed.json()["error"]["message"].removeprefix("model name=broken failed to load: ")
    assert chat(router, "text").status_code == 200
    assert chat(router, "broken").status_code == 500  # each request tries again, and fails the same way


def _stream(router: Running, model: str) -> str:
    """One streamed chat: ``done`` when it ended with [DONE], ``error`` when it ended with an error in the API's
    shape (an error event, or an error body); anything else raises."""
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 24, "stream": True}
    body["ignore_eos"] = True
    with httpx.stream("POST", router.url + "/v1/chat/completions", json=body, timeout=60) as response:
        if response.status_code != 200:
            error = json.loads(response.read())["error"]
            assert error["message"] and error["type"], error
            return "error"
        for line in response.iter_lines():
            if line == "data: [DONE]":
                return "done"
            if line.startswith("error: "):  # llama-server's error event, as the child itself would write it
                assert json.loads(line[7:])["error"]["message"] == f"model '{model}' stopped while answering"
                return "error"
    raise AssertionError(f"the {model} stream ended without [DONE] or an error")


@pytest.mark.slow
def test_children_killed_while_clients_stream_lose_no_request_and_hang_none(
    running: list[Running], router_models: Path
) -> None:
    router = start_router(running, router_models)
    outcomes: dict[str, list[str]] = {"text": [], "vision": []}
    problems: list[BaseException] = []
    stop = threading.Event()

    def client(model: str) -> None:
        try:
            while not stop.is_set():
                outcomes[model].append(_stream(router, model))
        except BaseException as exc:  # a hang (timeout), a cut answer, a transport error: all count against
            problems.append(exc)

    clients = [threading.Thread(target=client, args=(model,)) for model in outcomes]
    for thread in clients:
        thread.start()
    kills = 0
    rng = random.Random(7)
    while kills < 6:
        # Each model serves a whole stream again before the next kill (a state, not a pause: no speed decides it).
        done = {model: outcomes[model].count("done") for model in outcomes}
        deadline = time.monotonic() + 120
        while any(outcomes[model].count("done") <= done[model] for model in outcomes) and not problems:
            assert time.monotonic() < deadline, f"a model stopped serving after {kills} kills: {outcomes}"
            time.sleep(0.05)
        assert httpx.get(router.url + "/health", timeout=60).status_code == 200
        pid = child_pid(router, rng.choice(list(outcomes)))
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            kills += 1
    stop.set()
    for thread in clients:
        thread.join(120)
        assert not thread.is_alive(), "a client hung"
    assert problems == []
    assert kills >= 6
    assert all(outcomes[model].count("done") >= 3 for model in outcomes), outcomes
    assert set(outcomes["text"] + outcomes["vision"]) <= {"done", "error"}
    for model in outcomes:  # each serves again after the last kill
        assert _stream(router, model) == "done"


@pytest.mark.slow
def test_a_non_streamed_request_whose_child_dies_is_answered_by_a_fresh_child(
    running: list[Running], router_models: Path
) -> None:
    router = start_router(running, router_models)
    assert chat(router, "text").status_code == 200
    pid = child_pid(router, "text")
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # the request reaches a child that cannot answer...
    result: dict[str, Any] = {}
    asking = threading.Thread(target=lambda: result.update(reply=chat(router, "text", max_tokens=8)))
    asking.start()
    args = entries(router)["text"]["status"]["args"]
    port = int(args[args.index("--port") + 1])
    deadline = time.monotonic() + 60
    while not _unread_bytes_at(port):  # the request has reached the stopped child's socket
        assert time.monotonic() < deadline, "the request never reached the child"
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)  # ...and dies before it did
    asking.join(60)
    assert result["reply"].status_code == 200, result["reply"].text
    assert result["reply"].json()["usage"]["completion_tokens"] >= 1
    assert child_pid(router, "text") not in (None, pid)


def _two_children(running: list[Running], router_models: Path) -> tuple[Running, list[int]]:
    """A router with ``text`` and ``vision`` loaded, and their children's process ids."""
    router = start_router(running, router_models)
    for model in ("text", "vision"):
        assert chat(router, model).status_code == 200
    pids = [child_pid(router, model) for model in ("text", "vision")]
    assert None not in pids
    return router, [pid for pid in pids if pid is not None]


@pytest.mark.slow
def test_children_die_with_the_router_even_when_it_is_killed(running: list[Running], router_models: Path) -> None:
    router, pids = _two_children(running, router_models)
    router.process.kill()
    router.process.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
        time.sleep(0.1)
    assert [pid for pid in pids if Path(f"/proc/{pid}").exists()] == []


@pytest.mark.slow
def test_a_model_idle_past_its_time_to_live_is_unloaded(running: list[Running], router_models: Path) -> None:
    router = start_router(running, router_models, "--models-ttl", "1")
    assert chat(router, "text").status_code == 200
    assert entries(router)["text"]["status"]["value"] == "loaded"
    status = wait_status(router, "text", "unloaded", timeout_s=10)["status"]
    assert "failed" not in status


@pytest.mark.slow
def test_a_model_larger_than_the_memory_budget_is_refused_saying_so(
    running: list[Running], router_models: Path
) -> None:
    router = start_router(running, router_models, "--models-memory-max", "512K")
    size = (router_models / "models" / "text.gguf").stat().st_size
    reply = chat(router, "text")
    assert reply.status_code == 500
    assert reply.json()["error"]["message"] == (
        f"model name=text failed to load: model 'text' needs {size / 2**20:.1f} MiB for its files alone, "
        "more than --models-memory-max (0.5 MiB)"
    )


@pytest.mark.slow
def test_the_memory_budget_unloads_idle_models_below_models_max(running: list[Running], router_models: Path) -> None:
    probe = start_router(running, router_models)
    assert chat(probe, "text").status_code == 200
    one_child = entries(probe)["text"]["status"]["memory"]["held"]  # what the budget counts of a child
    probe.stop()
    # Room for a child and the files of one more, not for two children and a third's files.
    router = start_router(running, router_models, "--models-memory-max", str(int(one_child * 1.5)))
    for model in ("text", "vision", "audio"):
        assert chat(router, model).status_code == 200
    statuses = {name: entry["status"]["value"] for name, entry in entries(router).items()}
    assert statuses == {"audio": "loaded", "embed": "unloaded", "text": "unloaded", "vision": "loaded"}


@pytest.mark.slow
def test_sigterm_stops_every_child_and_ends_the_event_streams(running: list[Running], router_models: Path) -> None:
    router, pids = _two_children(running, router_models)
    events = httpx.stream("GET", router.url + "/models/sse", timeout=30)
    with events as stream:
        lines = stream.iter_lines()
        started = time.monotonic()
        router.process.terminate()
        assert list(lines) == []  # the stream ends, empty, when the router shuts down
        assert router.process.wait(10) == 0
    assert time.monotonic() - started < 5  # no wait for the stream to time out
    assert [pid for pid in pids if Path(f"/proc/{pid}").exists()] == []


def _unread_bytes_at(port: int) -> bool:
    """Whether a connection to loopback ``port`` holds bytes its (stopped) process has not read: /proc/net/tcp's
    receive queue of an established socket whose local port it is."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port, state, queues = int(fields[1].split(":")[1], 16), fields[3], fields[4]
        if local_port == port and state == "01" and int(queues.split(":")[1], 16) > 0:
            return True
    return False
