"""A replica's engine without Ray: the app run in-process from request records, ready only once loaded, its load
as the router reads it, and a client that leaves early freeing its slot."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from lfmserve.errors import LfmError, Unavailable
from lfmserve.scaleout.serve_asgi import HttpRequest, ResponseStart
from lfmserve.scaleout.serve_replica import REPLICA_HEADER, EngineReplica
from lfmserve.settings import Settings
from tests.conftest import wait_until_async


def chat(**fields: object) -> HttpRequest:
    body = {"messages": [{"role": "user", "content": "Hello"}], "temperature": 0, **fields}
    return HttpRequest(
        "POST",
        "/v1/chat/completions",
        headers=((b"content-type", b"application/json"),),
        body=json.dumps(body).encode(),
    )


def test_a_started_replica_has_its_model_loaded_and_names_itself(tiny_gguf: Path) -> None:
    async def run() -> None:
        replica = EngineReplica(Settings.of(model=str(tiny_gguf), threads=1, parallel=2, ctx_size=1024), name="r1")
        await replica.start()
        try:
            replica.check_health()
            assert replica.load().n_slots == 2 and replica.load().n_requests == 0
            answer = await replica.respond(chat(max_tokens=4))
            assert answer.status == 200 and answer.header(REPLICA_HEADER) == b"r1"
            assert json.loads(answer.body)["usage"]["completion_tokens"] == 4
        finally:
            await replica.stop()
        with pytest.raises(Unavailable):
            replica.check_health()  # shutting down

    asyncio.run(run())


def test_a_stream_comes_as_its_start_then_each_event_and_leaving_early_frees_the_slot(tiny_gguf: Path) -> None:
    async def run() -> None:
        replica = EngineReplica(Settings.of(model=str(tiny_gguf), threads=1, parallel=1, ctx_size=1024), name="r1")
        await replica.start()
        try:
            parts = replica.stream(chat(stream=True, max_tokens=100000, ignore_eos=True))
            start = await anext(parts)
            assert isinstance(start, ResponseStart) and start.status == 200
            chunk = await anext(parts)
            assert isinstance(chunk, bytes) and chunk.startswith(b"data: ")
            assert replica.load().n_busy_slots == 1
            await parts.aclose()  # the client left
            await wait_until_async(lambda: replica.load().n_busy_slots == 0, "the slot its client left is free")
        finally:
            await replica.stop()

    asyncio.run(run())


def test_a_model_that_fails_to_load_fails_the_start(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf")

    async def run() -> None:
        replica = EngineReplica(Settings.of(model=str(bad), threads=1), name="r1")
        with pytest.raises(LfmError, match="Model failed to load"):
            await replica.start()
        with pytest.raises(Unavailable, match="failed to load"):
            replica.check_health()
        await replica.stop()

    asyncio.run(run())
    with pytest.raises(LfmError, match="not found"):
        EngineReplica(Settings.of(model=str(tmp_path / "missing.gguf")), name="r1")
