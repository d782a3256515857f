"""Resumable streams over real HTTP on loopback (llama-server's ``X-Conversation-Id``): a streamed answer replayed
byte for byte, from an offset, followed live; a client that leaves while the generation goes on; a stop; a newer
request of the same conversation; the lookup; and the routes' errors, as llama-server words them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from lfmserve.api.handlers import install_error_handlers
from lfmserve.api.stream_sessions import StreamSessions
from lfmserve.api.streams import router
from lfmserve.settings import Settings
from tests.conftest import STATE_TIMEOUT_S, ServerThread, wait_until

ASK = [{"role": "user", "content": "hello"}]
#: A streamed reply that never ends by itself on the :func:`endless` server (no max_tokens): only a stop ends it.
ENDLESS = {"messages": ASK, "stream": True, "ignore_eos": True}


@pytest.fixture(scope="module")
def server(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    # One thread: llama.cpp's threads spin while they wait, so two of them on a busy two-core machine crawl.
    return server_factory(Settings.of(model=str(tiny_gguf), ctx_size=8192, parallel=2, threads=1))


@pytest.fixture
def client(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=STATE_TIMEOUT_S) as http:
        yield http


@pytest.fixture(scope="module")
def endless_server(server_factory: Callable[..., ServerThread], tiny_llama_gguf: Path) -> ServerThread:
    """Two slots on an attention-only model with ``--context-shift``: an :data:`ENDLESS` reply runs until it is
    stopped, so however late the test stops it, it is still running."""
    settings = Settings.of(model=str(tiny_llama_gguf), ctx_size=1024, parallel=2, threads=1, context_shift=True)
    return server_factory(settings)


@pytest.fixture
def endless(endless_server: ServerThread) -> Iterator[httpx.Client]:
    """A client of the :func:`endless_server`."""
    with httpx.Client(base_url=endless_server.url, timeout=STATE_TIMEOUT_S) as http:
        yield http


def streamed(client: httpx.Client, conv_id: str, body: dict[str, Any], path: str = "/v1/chat/completions") -> bytes:
    """The raw bytes of a streamed answer, read to its end."""
    with client.stream("POST", path, json=body, headers={"X-Conversation-Id": conv_id}) as response:
        assert response.status_code == 200
        return b"".join(response.iter_raw())


def replay(client: httpx.Client, conv_id: str, start: str | None = None) -> httpx.Response:
    params = {"conv_id": conv_id} if start is None else {"conv_id": conv_id, "from": start}
    return client.get("/v1/stream", params=params)


def lookup(client: httpx.Client, *ids: Any) -> list[dict[str, Any]]:
    response = client.post("/v1/streams/lookup", json={"conversation_ids": list(ids)})
    assert response.status_code == 200
    answer: list[dict[str, Any]] = response.json()
    return answer


def wait_stopped(client: httpx.Client) -> None:
    """Until no slot of the :func:`endless_server` generates: only a stop ends an :data:`ENDLESS` reply (a stopped
    generation is dropped at the engine's next step)."""
    wait_until(
        lambda: not any(slot["is_processing"] for slot in client.get("/slots").json()),
        "the generation ends after its stop",
    )


def events(raw: bytes) -> list[Any]:
    return [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: {")]


def test_a_finished_stream_replays_byte_for_byte_from_the_start_and_from_an_offset(client: httpx.Client) -> None:
    original = streamed(client, "whole", {"messages": ASK, "stream": True, "max_tokens": 8, "temperature": 0})
    assert original.endswith(b"data: [DONE]\n\n")
    again = replay(client, "whole", "0")
    assert (again.status_code, again.content) == (200, original)
    assert again.headers["content-type"].startswith("text/event-stream")
    assert again.headers["x-accel-buffering"] == "no"
    assert replay(client, "whole").content == original  # no offset: from the start
    half = len(original) // 2
    assert replay(client, "whole", str(half)).content == original[half:]
    assert replay(client, "whole", "12abc").content == original[12:]  # read as std::stoull reads it
    assert replay(client, "whole", str(len(original))).content == b""
    [entry] = lookup(client, "whole")
    assert entry["conversation_id"] == "whole" and entry["is_done"] is True
    assert entry["total_bytes"] == len(original)
    assert 0 < entry["started_at"] <= entry["completed_at"] <= time.time() + 1


def test_every_completion_route_is_resumable(client: httpx.Client) -> None:
    short = {"stream": True, "max_tokens": 4}
    for path, body in [
        ("/completion", {**short, "prompt": "hi"}),
        ("/v1/completions", {**short, "prompt": "hi"}),
        ("/v1/messages", {**short, "messages": ASK}),
        ("/v1/responses", {"stream": True, "max_output_tokens": 4, "input": "hi"}),
    ]:
        original = streamed(client, "route" + path, body, path)
        assert replay(client, "route" + path).content == original, path


def test_a_running_generation_is_followed_live_to_its_end(client: httpx.Client) -> None:
    body = {**ENDLESS, "max_tokens": 400}
    read: list[bytes] = []
    with client.stream("POST", "/v1/chat/completions", json=body, headers={"X-Conversation-Id": "live"}) as response:
        chunks = response.iter_raw()
        first = next(chunks)
        reader = threading.Thread(target=lambda: read.append(first + b"".join(chunks)))
        reader.start()  # the first client keeps reading: a client that stops reading holds its stream back
        [entry] = lookup(client, "live")
        assert entry["is_done"] is False
        followed = replay(client, "live", "0")
        reader.join(timeout=STATE_TIMEOUT_S)
    assert followed.status_code == 200
    assert followed.content == read[0]
    assert read[0].endswith(b"data: [DONE]\n\n")


def test_a_client_that_leaves_mid_stream_leaves_the_generation_running_into_the_session(
    client: httpx.Client,
) -> None:
    body = {**ENDLESS, "max_tokens": 300}
    with client.stream("POST", "/v1/chat/completions", json=body, headers={"X-Conversation-Id": "gone"}) as response:
        next(response.iter_lines())  # one event, then the connection is closed
    assert lookup(client, "gone")[0]["is_done"] is False
    wait_until(lambda: lookup(client, "gone")[0]["is_done"], "the generation nobody reads finishes")
    whole = replay(client, "gone", "0").content
    assert whole.endswith(b"data: [DONE]\n\n")
    chunks = events(whole)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["timings"]["predicted_n"] == 300  # every token, though nobody was reading


def test_a_stop_ends_the_generation_and_the_session(endless: httpx.Client) -> None:
    with endless.stream(
        "POST", "/v1/chat/completions", json=ENDLESS, headers={"X-Conversation-Id": "stop"}
    ) as response:
        chunks = response.iter_raw()
        first = next(chunks)
        stopped = endless.delete("/v1/stream", params={"conv_id": "stop"})
        rest = b"".join(chunks)  # an endless stream: only the stop ends it, cleanly, without its [DONE]
    assert (stopped.status_code, stopped.content) == (204, b"")
    assert stopped.headers["content-type"] == "application/json"
    assert b"[DONE]" not in first + rest
    assert events(first + rest)[-1]["choices"][0]["finish_reason"] is None  # no last chunk either
    missing = replay(endless, "stop", "0")
    assert missing.status_code == 404
    assert missing.json()["error"] == {"code": 404, "message": "Stream not found or expired", "type": "not_found_error"}
    assert lookup(endless, "stop") == []
    wait_stopped(endless)
    assert endless.delete("/v1/stream", params={"conv_id": "stop"}).status_code == 204  # a stop of nothing too


def test_a_stop_ends_a_generation_nobody_reads_any_more(endless: httpx.Client) -> None:
    with endless.stream(
        "POST", "/v1/chat/completions", json=ENDLESS, headers={"X-Conversation-Id": "orphan"}
    ) as response:
        next(response.iter_lines())
    assert lookup(endless, "orphan")[0]["is_done"] is False
    assert endless.delete("/v1/stream", params={"conv_id": "orphan"}).status_code == 204
    wait_stopped(endless)


def test_a_newer_request_of_the_conversation_replaces_its_stream(endless: httpx.Client) -> None:
    first: list[bytes] = []
    with endless.stream(
        "POST", "/v1/chat/completions", json=ENDLESS, headers={"X-Conversation-Id": "again"}
    ) as response:
        chunks = response.iter_raw()
        head = next(chunks)
        reader = threading.Thread(target=lambda: first.append(head + b"".join(chunks)))
        reader.start()
        second = streamed(endless, "again", {"messages": ASK, "stream": True, "max_tokens": 4})
        reader.join(timeout=STATE_TIMEOUT_S)
        assert not reader.is_alive(), "the first stream went on after the newer request"
    assert b"[DONE]" not in first[0]  # an endless stream: cancelled by the newer request, ended cleanly
    assert second.endswith(b"data: [DONE]\n\n")
    assert replay(endless, "again").content == second
    wait_stopped(endless)


def test_a_whole_answer_replaces_the_session_and_a_refused_request_keeps_it(client: httpx.Client) -> None:
    original = streamed(client, "kept", {"messages": ASK, "stream": True, "max_tokens": 4})
    refused = client.post("/v1/chat/completions", json={"messages": 5}, headers={"X-Conversation-Id": "kept"})
    assert refused.status_code == 400
    assert replay(client, "kept").content == original
    whole = client.post(
        "/v1/chat/completions", json={"messages": ASK, "max_tokens": 4}, headers={"X-Conversation-Id": "kept"}
    )
    assert whole.status_code == 200
    assert replay(client, "kept").status_code == 404


def test_the_lookup_answers_only_the_ids_asked(client: httpx.Client) -> None:
    for conv_id in ("asked", "asked::org/model:Q8_0", "other"):
        streamed(client, conv_id, {"messages": ASK, "stream": True, "max_tokens": 2})
    assert [e["conversation_id"] for e in lookup(client, "asked")] == ["asked", "asked::org/model:Q8_0"]
    assert lookup(client, "nobody", "", 5) == []
    assert lookup(client) == []
    assert client.post("/v1/streams/lookup", json={"conversation_ids": "asked"}).json() == []
    bad = client.post("/v1/streams/lookup", content=b"not json")
    assert bad.status_code == 400
    assert bad.json()["error"]["message"].startswith("invalid body: ")


def test_the_routes_refuse_a_missing_id_and_a_bad_offset(client: httpx.Client) -> None:
    missing = {"code": 400, "message": "Missing conversation id in path", "type": "invalid_request_error"}
    assert client.get("/v1/stream").json()["error"] == missing
    assert client.get("/v1/stream", params={"conv_id": ""}).json()["error"] == missing
    assert client.delete("/v1/stream").json()["error"] == missing
    streamed(client, "offset", {"messages": ASK, "stream": True, "max_tokens": 2})
    bad = replay(client, "offset", "soon")
    assert (bad.status_code, bad.json()["error"]["message"]) == (400, "Invalid 'from' offset")
    assert replay(client, "nobody", "soon").status_code == 404  # the session is looked up first, as llama-server does


@pytest.fixture(scope="module")
def capped() -> Iterator[tuple[ServerThread, StreamSessions]]:
    """The routes alone over sessions that keep 8 bytes, with one finished session ``c`` of 12."""
    sessions = StreamSessions(max_bytes=8)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, StreamSessions]]:
        session = sessions.open("c")
        session.append(b"0123456789ab")
        session.finish()
        yield {"streams": sessions}

    app = FastAPI(lifespan=lifespan)
    install_error_handlers(app)
    app.include_router(router)
    started = ServerThread(app).start()
    yield started, sessions
    started.stop()


def test_an_offset_below_the_dropped_bytes_is_lost(capped: tuple[ServerThread, StreamSessions]) -> None:
    server, _ = capped
    with httpx.Client(base_url=server.url, timeout=10) as http:
        lost = replay(http, "c", "3")
        assert (lost.status_code, lost.json()["error"]["message"]) == (400, "Stream offset lost, please restart")
        assert replay(http, "c", "4").content == b"456789ab"
        [entry] = lookup(http, "c")
        assert entry["total_bytes"] == 12
