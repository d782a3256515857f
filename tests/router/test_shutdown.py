"""A router stopped by SIGTERM while it relays answers: the running requests get ``--shutdown-timeout``, then each
ends with a 503 in its API's shape (a stream with its error event), the children are stopped, and it exits 0."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Running
from tests.router.conftest import start_router

SHUTDOWN_TIMEOUT_S = 1
#: A child's stop timeout when its preset says none (``stop-timeout``).
STOP_TIMEOUT_S = 10
SHUTTING_DOWN = {"code": 503, "message": "the server is shutting down", "type": "unavailable_error"}


def test_sigterm_ends_the_relayed_answers_in_their_shapes_then_stops_the_children(
    running: list[Running], router_models: Path, tiny_llama_gguf: Path, tmp_path: Path
) -> None:
    preset = tmp_path / "preset.ini"
    preset.write_text(f"version = 1\n\n[endless]\nmodel = {tiny_llama_gguf}\n")
    # Three slots, and answers that never end by themselves: a full context is shifted (the llama architecture
    # can be), and the tokens asked for take minutes.
    flags = ["--parallel", "3", "--context-shift", "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S)]
    router = start_router(running, router_models, *flags, preset=preset)
    endless = {"model": "endless", "max_tokens": 100000, "ignore_eos": True}
    lines: dict[str, list[str]] = {"openai": [], "anthropic": []}
    streaming = {name: threading.Event() for name in lines}
    whole: list[httpx.Response] = []

    def stream(name: str, path: str) -> None:
        body = {**endless, "messages": [{"role": "user", "content": name}], "stream": True}
        with httpx.stream("POST", router.url + path, json=body, timeout=60) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line:
                    lines[name].append(line)
                    streaming[name].set()

    def ask() -> None:
        body: dict[str, Any] = {**endless, "messages": [{"role": "user", "content": "whole"}]}
        whole.append(httpx.post(router.url + "/v1/chat/completions", json=body, timeout=60))

    clients = [
        threading.Thread(target=stream, args=("openai", "/v1/chat/completions")),
        threading.Thread(target=stream, args=("anthropic", "/v1/messages")),
        threading.Thread(target=ask),
    ]
    for client in clients:
        client.start()
    for event in streaming.values():
        assert event.wait(timeout=60)
    _wait_for_every_slot(router)  # the whole answer is generating too
    router.process.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    for client in clients:
        client.join(timeout=60)
        assert not client.is_alive()
    assert router.process.wait(timeout=60) == 0
    # The grace, then the children's stop (they are idle by then, their clients gone): within both timeouts.
    assert time.monotonic() - sent < SHUTDOWN_TIMEOUT_S + STOP_TIMEOUT_S
    assert lines["openai"][-1] == "error: " + json.dumps({"error": SHUTTING_DOWN})
    assert lines["anthropic"][-2:] == ["event: error", "data: " + json.dumps(SHUTTING_DOWN)]
    assert (whole[0].status_code, whole[0].json()) == (503, {"error": SHUTTING_DOWN})
    log = router.stop()
    assert "Traceback" not in log and "timeout graceful shutdown exceeded" not in log


def _wait_for_every_slot(router: Running, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(slot["is_processing"] for slot in httpx.get(router.url + "/slots?model=endless", timeout=10).json()):
        assert time.monotonic() < deadline, "the three requests never all ran"
        time.sleep(0.05)
