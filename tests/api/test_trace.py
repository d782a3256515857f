"""Request shapes: the routing key is stable per conversation, and the trace recorder keeps shapes, not text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from lfmserve.api.trace import TraceRecord, TraceRecorder, request_shape, route_key

SYSTEM = {"role": "system", "content": "You describe camera snapshots."}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def turns(first: str) -> list[dict[str, Any]]:
    """Three turns of one conversation, as a client re-sends them."""
    history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": first}]
    bodies = []
    for n in range(3):
        bodies.append({"messages": list(history), "tools": TOOLS, "temperature": 0.1 * n, "stream": n % 2 == 0})
        history += [{"role": "assistant", "content": f"answer {n}"}, {"role": "user", "content": f"more {n}"}]
    return bodies


def test_the_key_is_the_same_on_every_turn_of_a_conversation() -> None:
    keys = {route_key({}, body) for body in turns("What is at the door?")}
    assert len(keys) == 1 and next(iter(keys)).startswith("chat:")
    assert route_key({}, turns("Who is in the garden?")[0]) not in keys  # another conversation
    body = turns("What is at the door?")[0]
    assert route_key({}, {**body, "tools": []}) not in keys  # other tools: another prompt
    assert route_key({}, {**body, "chat_template_kwargs": {"enable_thinking": True}}) not in keys


def test_the_session_header_wins_and_other_shapes_have_keys() -> None:
    assert route_key({"X-Session-Id": "abc"}, turns("hi")[0]) == "session:abc"
    anthropic = {"system": "You describe.", "messages": [{"role": "user", "content": "hi"}]}
    assert route_key({}, anthropic) == route_key(
        {}, {**anthropic, "messages": [*anthropic["messages"], {"role": "assistant", "content": "x"}]}
    )
    assert route_key({}, anthropic) != route_key({}, {**anthropic, "system": "Other."})
    long = "x" * 600
    assert route_key({}, {"prompt": long + "a"}) == route_key({}, {"prompt": long + "b"})  # the same opening
    assert route_key({}, {"prompt": "a" + long}).startswith("prompt:")
    assert route_key({}, {"input": [{"role": "user", "content": "hi"}], "instructions": "Be brief."}).startswith(
        "chat:"
    )
    assert route_key({}, {"tokens": [1, 2]}) == ""


def test_each_turn_extends_the_previous_turns_boundaries_and_no_text_is_kept() -> None:
    system = {"role": "system", "content": "secret system prompt"}
    first = {"messages": [system, {"role": "user", "content": "secret question"}], "max_tokens": 64}
    second = {"messages": [*first["messages"], {"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]}
    one, two = request_shape(1.0, {}, first), request_shape(2.0, {}, second)
    assert two.boundaries[:2] == one.boundaries and len(two.boundaries) == 4
    assert one.key == two.key and (one.max_tokens, two.max_tokens) == (64, None)
    assert "secret" not in one.to_json()
    assert TraceRecord.from_json(one.to_json()) == one


def test_the_recorder_writes_a_line_and_the_app_still_gets_the_body(tmp_path: Path) -> None:
    async def echo(request: Request) -> JSONResponse:
        return JSONResponse(await request.json())

    app = Starlette(
        routes=[Route("/v1/chat/completions", echo, methods=["POST"]), Route("/tokenize", echo, methods=["POST"])]
    )
    path = tmp_path / "trace.jsonl"
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    with TestClient(TraceRecorder(app, path)) as client:
        assert client.post("/v1/chat/completions", json=body).json() == body
        assert client.post("/tokenize", json={"content": "hi"}).json() == {"content": "hi"}
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    record = TraceRecord.from_json(lines[0])
    assert (record.key, record.boundaries, record.max_tokens) == (
        request_shape(0, {}, body).key,
        request_shape(0, {}, body).boundaries,
        3,
    )
    assert json.loads(lines[0])["t"] >= 0


def test_trace_requests_records_what_a_real_server_answers(tmp_path: Path, tiny_gguf: Path) -> None:
    from lfmserve.settings import Settings
    from tests.conftest import serve

    path = tmp_path / "trace.jsonl"
    server = serve(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1, trace_requests=str(path)))
    try:
        server.wait_ready()
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        response = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60)
        assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 2
    finally:
        server.stop()
    (record,) = [TraceRecord.from_json(line) for line in path.read_text().splitlines()]
    assert (record.key, record.boundaries, record.max_tokens) == (
        request_shape(0, {}, body).key,
        request_shape(0, {}, body).boundaries,
        2,
    )
