"""The offline replay: on a synthetic 16-user trace, our ranking reuses more of the prompt cache than round robin
(and than Ray's consistent hashing), with a TTFT p95 no worse; and the trace recorder keeps shapes, not text."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from lfmserve.scaleout.simulate import consistent_hash, ours, power_of_two, round_robin, simulate, synthetic_trace
from lfmserve.scaleout.trace import TraceRecord, TraceRecorder, request_shape


def test_ours_beats_round_robin_on_the_16_user_trace(capsys: pytest.CaptureFixture[str]) -> None:
    trace = synthetic_trace(n_users=16, turns=6)
    assert len(trace) == 96
    results = {
        "round-robin": simulate(trace, round_robin(), 2),
        "power-of-two": simulate(trace, power_of_two(), 2),
        "consistent-hash": simulate(trace, consistent_hash(slots=2), 2),
        "ours": simulate(trace, ours(slots=2), 2),
    }
    with capsys.disabled():
        for name, result in results.items():
            hits, p95 = f"{result.hit_rate:.3f}", f"{result.ttft_p95_s:.2f}"
            print(f"\n{name}: hit rate {hits}, TTFT p95 {p95} s, requests {result.requests_per_replica}")
    assert results["ours"].hit_rate > results["round-robin"].hit_rate + 0.05
    assert results["ours"].hit_rate > results["consistent-hash"].hit_rate
    assert results["ours"].ttft_p95_s <= results["round-robin"].ttft_p95_s
    assert max(results["ours"].requests_per_replica) <= 52  # balanced (consistent hashing put 60 on one)


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
    server = serve(Settings(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1, trace_requests=str(path)))
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
