"""Resumable streams through a router, against real children: the router remembers which model holds each
conversation, passes ``GET``/``DELETE /v1/stream`` and the lookup to that child only, answers 503 while the
model loads, and a stop during the load cancels the waiting request (llama-server's ``conv_models``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import Running
from tests.router.conftest import _children, entries, start_router

#: A conversation id as llama-server's web UI makes it on a router: the model's name after ``::``.
CONV = "conv-router::text"


@pytest.fixture(scope="module")
def router(router_models: Path) -> Iterator[Running]:
    """One router for the module: each test uses a model the others leave alone."""
    started: list[Running] = []
    yield start_router(started, router_models)
    for process in started:
        process.stop()


def _body(model: str, max_tokens: int) -> dict[str, Any]:
    messages = [{"role": "user", "content": "hello"}]
    return {"model": model, "messages": messages, "stream": True, "max_tokens": max_tokens, "ignore_eos": True}


def _replay(http: httpx.Client, conv_id: str) -> httpx.Response:
    return http.get("/v1/stream", params={"conv_id": conv_id, "from": "0"})


@contextmanager
def held_loads(router: Running) -> Iterator[None]:
    """Models that start loading meanwhile stay ``loading``: the router's fork server, which forks each child, is
    stopped (SIGSTOP) until the block ends.

    The router launches one model at a time. A load an earlier test left running (its request cancelled, its child
    still being forked) would hold every later launch while the fork server is stopped, so the block begins only
    once no model is loading."""
    deadline = time.monotonic() + 60
    while loading := [name for name, entry in entries(router).items() if entry["status"]["value"] == "loading"]:
        assert time.monotonic() < deadline, f"{loading} never stopped loading"
        time.sleep(0.01)
    [fork_server] = [
        pid for pid in _children(router.process.pid) if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    os.kill(fork_server, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(fork_server, signal.SIGCONT)


def _wait_loading(router: Running, model: str) -> None:
    deadline = time.monotonic() + 30
    while entries(router)[model]["status"]["value"] != "loading":
        assert time.monotonic() < deadline, f"{model} was never seen loading"
        time.sleep(0.01)


def test_the_router_passes_replay_lookup_and_stop_to_the_owning_child(router: Running) -> None:
    with httpx.Client(base_url=router.url, timeout=60) as http:
        assert _replay(http, CONV).status_code == 404  # no request named it yet
        with http.stream(
            "POST", "/v1/chat/completions", json=_body("text", 8), headers={"X-Conversation-Id": CONV}
        ) as response:
            assert response.status_code == 200
            original = b"".join(response.iter_raw())
        replayed = _replay(http, CONV)
        assert (replayed.status_code, replayed.content) == (200, original)
        offset = http.get("/v1/stream", params={"conv_id": CONV, "from": "10"})
        assert offset.content == original[10:]
        found = http.post("/v1/streams/lookup", json={"conversation_ids": [CONV, "conv-router", "nobody"]})
        assert [entry["conversation_id"] for entry in found.json()] == [CONV]
        assert found.json()[0]["total_bytes"] == len(original)
        assert http.post("/v1/streams/lookup", content=b"not json").json() == []  # the router's answer to it
        stopped = http.delete("/v1/stream", params={"conv_id": CONV})
        assert (stopped.status_code, stopped.content) == (204, b"")
        missing = _replay(http, CONV)
        assert (missing.status_code, missing.json()["error"]["type"]) == (404, "not_found_error")
        assert http.post("/v1/streams/lookup", json={"conversation_ids": [CONV]}).json() == []
        assert http.get("/v1/stream").json()["error"]["message"] == "Missing conversation id in path"


def test_a_stop_while_the_model_loads_cancels_the_waiting_request(router: Running) -> None:
    conv_id = "conv-cancel::vision"
    answer: list[httpx.Response] = []

    def post() -> None:
        with httpx.Client(base_url=router.url, timeout=60) as http:
            body = _body("vision", 512)
            answer.append(http.post("/v1/chat/completions", json=body, headers={"X-Conversation-Id": conv_id}))

    poster = threading.Thread(target=post)
    with httpx.Client(base_url=router.url, timeout=60) as http, held_loads(router):
        poster.start()
        _wait_loading(router, "vision")
        loading = _replay(http, conv_id)
        assert (loading.status_code, loading.json()["error"]) == (
            503,
            {"code": 503, "message": "Stream owner model is loading, retry later", "type": "unavailable_error"},
        )
        assert http.delete("/v1/stream", params={"conv_id": conv_id}).status_code == 204
        poster.join(timeout=60)
        [cancelled] = answer
        assert cancelled.status_code == 400
        assert cancelled.json()["error"]["message"] == "request cancelled by a stop while the model was loading"
        assert _replay(http, conv_id).status_code == 404


def test_a_client_gone_while_the_model_loads_still_gets_its_answer_into_the_session(router: Running) -> None:
    conv_id = "conv-reload::audio"
    body = json.dumps(_body("audio", 16))
    url = urlsplit(router.url)
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
        f"X-Conversation-Id: {conv_id}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}"
    )
    with httpx.Client(base_url=router.url, timeout=60) as http:
        with held_loads(router):
            with socket.create_connection((url.hostname, url.port)) as page:  # a page reloaded while the model loads
                page.sendall(request.encode())
                _wait_loading(router, "audio")
            assert _replay(http, conv_id).status_code == 503
        deadline = time.monotonic() + 60
        while (replayed := _replay(http, conv_id)).status_code != 200:
            assert replayed.status_code in (503, 404)  # 404: loaded, and the request not yet at the child
            assert time.monotonic() < deadline
            time.sleep(0.02)
    assert replayed.content.endswith(b"data: [DONE]\n\n")
    chunks = [json.loads(line[6:]) for line in replayed.text.splitlines() if line.startswith("data: {")]
    assert chunks[-1]["timings"]["predicted_n"] == 16  # the whole answer, though its client had gone
