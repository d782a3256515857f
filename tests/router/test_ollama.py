"""Ollama's API on the router, through Ollama's own Python client: every model listed and shown without loading
it, requests routed by any of a model's names, ``keep_alive`` deciding when a model unloads (0 at once after the
answer, a duration for ``/api/ps``, the empty load and unload requests), and a stream whose child dies ending
with Ollama's error line."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
import ollama
import pytest

from tests.conftest import Running
from tests.router.conftest import child_pid, entries, wait_status

ASK = [{"role": "user", "content": "hello"}]
GREEDY = {"temperature": 0, "num_predict": 4}


@pytest.fixture
def router(idle_router: Running) -> Running:
    """The module's shared router, no model loaded (tests/router/conftest.py): these tests load, unload and kill
    children, and change nothing else."""
    return idle_router


@pytest.fixture
def client(router: Running) -> Iterator[ollama.Client]:
    with ollama.Client(host=router.url) as client:
        yield client


def test_every_model_is_listed_and_shown_without_loading_one(
    router: Running, client: ollama.Client, router_models: Path
) -> None:
    models = router_models / "models"
    listed = httpx.get(router.url + "/api/tags").json()["models"]
    assert [entry["name"] for entry in listed] == ["audio:latest", "embed:latest", "text:latest", "vision:latest"]
    sizes = {entry["name"]: entry["size"] for entry in listed}
    assert sizes["text:latest"] == (models / "text.gguf").stat().st_size
    vision = models / "vision"
    assert sizes["vision:latest"] == sum(path.stat().st_size for path in vision.iterdir())
    assert {entry["details"]["family"] for entry in listed} == {"lfm2"}
    shown = {name: client.show(name) for name in ("vision", "audio:latest", "embedder", "chat:latest")}
    assert {name: card.capabilities for name, card in shown.items()} == {
        "vision": ["completion", "tools", "vision"],
        "audio:latest": ["completion", "tools", "audio"],
        "embedder": ["completion", "tools", "embedding"],
        "chat:latest": ["completion", "tools"],
    }
    contexts = {name: (card.modelinfo or {})["lfm2.context_length"] for name, card in shown.items()}
    assert contexts == {"vision": 2048, "audio:latest": 2048, "embedder": 512, "chat:latest": 2048}
    assert {entry["status"]["value"] for entry in entries(router).values()} == {"unloaded"}
    assert client.ps().models == []
    assert client.pull("lfm-text").status == "success"
    with pytest.raises(ollama.ResponseError) as missing:
        client.show("nope")
    assert (missing.value.error, missing.value.status_code) == ("model 'nope' not found", 404)
    with pytest.raises(ollama.ResponseError) as refused:
        client.delete("lfm-text")  # a model of the router's folder: only the Hugging Face cache's are removed
    assert (refused.value.error, refused.value.status_code) == (
        "model 'text' is not removable: only a model of the Hugging Face cache is",
        400,
    )


def test_keep_alive_decides_when_the_model_unloads(router: Running, client: ollama.Client) -> None:
    answer = client.chat(model="lfm-text:latest", messages=ASK, options=GREEDY)
    assert (answer.model, answer.done_reason, answer.eval_count) == ("lfm-text:latest", "length", 4)
    loaded = client.ps().models
    assert [(m.model, m.context_length) for m in loaded] == [("text:latest", 2048)]
    assert loaded[0].expires_at is not None and loaded[0].expires_at.year > 2200  # no --models-ttl: for ever
    client.chat(model="text", messages=ASK, options=GREEDY, keep_alive="10m")
    expires = client.ps().models[0].expires_at
    assert expires is not None and abs((expires - datetime.now(UTC)).total_seconds() - 600) < 30
    streamed = list(client.chat(model="text", messages=ASK, options=GREEDY, keep_alive=0, stream=True))
    assert streamed[-1].done and streamed[-1].eval_count == 4
    wait_status(router, "text", "unloaded", timeout_s=10)
    loaded_again = client.chat(model="chat", messages=[])
    assert (loaded_again.done_reason, entries(router)["text"]["status"]["value"]) == ("load", "loaded")
    unloaded = client.generate(model="text", prompt="", keep_alive=0)
    assert (unloaded.done_reason, entries(router)["text"]["status"]["value"]) == ("unload", "unloaded")
    assert client.chat(model="text", messages=[], keep_alive=0).done_reason == "unload"  # already gone: still said


@pytest.mark.slow  # a router and two children
def test_generation_and_embeddings_reach_the_named_child(router: Running, client: ollama.Client) -> None:
    lines = httpx.post(
        router.url + "/api/generate", json={"model": "text", "prompt": "hi", "options": GREEDY}, timeout=60
    )
    assert lines.headers["content-type"] == "application/x-ndjson"
    parsed = [json.loads(line) for line in lines.text.splitlines()]
    assert [line["done"] for line in parsed] == [False] * (len(parsed) - 1) + [True]
    streamed = list(client.generate(model="lfm-text", prompt="hi", options=GREEDY, stream=True))
    assert "".join(part.response or "" for part in streamed) == "".join(line["response"] for line in parsed)
    vectors = client.embed(model="embedder", input=["a", "b"]).embeddings
    assert len(vectors) == 2 and np.allclose(np.linalg.norm(np.array(vectors), axis=1), 1.0)
    legacy = client.embeddings(model="embed:latest", prompt="a").embedding
    assert np.allclose(np.array(legacy) / np.linalg.norm(legacy), vectors[0], atol=1e-5)
    with pytest.raises(ollama.ResponseError) as missing:
        client.chat(model="nope", messages=ASK)
    assert missing.value.status_code == 404


@pytest.mark.slow  # a fault test, as the router's others in test_faults.py
def test_a_stream_whose_child_dies_ends_with_an_error_line(router: Running) -> None:
    # A schema the answer cannot end within: a thousand integers, so the child is still writing when it dies.
    endless = {"type": "array", "items": {"type": "integer", "minimum": 1000000}, "minItems": 1000}
    body = {"model": "text", "messages": ASK, "format": endless, "options": {"num_predict": 100000}}
    with httpx.stream("POST", router.url + "/api/chat", json=body, timeout=60) as response:
        lines = response.iter_lines()
        assert json.loads(next(lines))["done"] is False
        pid = child_pid(router, "text")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        rest = []
        for line in lines:
            rest.append(json.loads(line))
            assert time.monotonic() < deadline
    assert rest[-1] == {"error": "model 'text' stopped while answering"}
    assert all("error" not in line for line in rest[:-1])
