"""Real text from a real model: Gemma-3-270M (base, sliding-window attention) from PyPI, via /completion."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from lfmserve.settings import Settings

from .conftest import ServerThread


def completion(server: ServerThread, **body: object) -> dict[str, object]:
    response = httpx.post(server.url + "/completion", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_greedy_text_is_real_deterministic_and_cache_independent(server_factory, gemma_gguf: Path) -> None:  # type: ignore[no-untyped-def]
    server = server_factory(Settings(model=str(gemma_gguf), ctx_size=1024, parallel=2, threads=2))
    body = {"prompt": "The Eiffel Tower is located in the city of", "n_predict": 12, "temperature": 0}
    first = completion(server, **body)
    assert str(first["content"]).startswith(" Paris, France. It is the tallest")
    repeated = completion(server, **body)  # the sliding-window model restores its checkpoint
    fresh = completion(server, **body, cache_prompt=False)
    assert first["content"] == repeated["content"] == fresh["content"]
    assert repeated["timings"]["cache_n"] == first["tokens_evaluated"] - 1  # type: ignore[index,operator]
    with httpx.stream("POST", server.url + "/completion", json={**body, "stream": True}, timeout=120) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert "".join(c["content"] for c in chunks) == first["content"]


def test_stop_string_on_real_text(server_factory, gemma_gguf: Path) -> None:  # type: ignore[no-untyped-def]
    server = server_factory(Settings(model=str(gemma_gguf), ctx_size=1024, parallel=1, threads=2))
    prompt = "The Eiffel Tower is located in the city of"
    full = str(completion(server, prompt=prompt, n_predict=12, temperature=0)["content"])
    stopped = completion(server, prompt=prompt, n_predict=12, temperature=0, stop=["France"])
    assert stopped["content"] == full[: full.index("France")] == " Paris, "
    assert (stopped["stop_type"], stopped["stopping_word"]) == ("word", "France")
