"""Real text from a real model: Gemma-3-270M (base, sliding-window attention) from PyPI, via /completion."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from lfmserve.settings import Settings
from tests.conftest import ServerThread


def completion(server: ServerThread, **body: object) -> dict[str, object]:
    response = httpx.post(server.url + "/completion", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_greedy_text_is_real_deterministic_and_cache_independent(server_factory, gemma_gguf: Path) -> None:  # type: ignore[no-untyped-def]
    server = server_factory(Settings.of(model=str(gemma_gguf), ctx_size=1024, parallel=2, threads=2))
    body = {"prompt": "The Eiffel Tower is located in the city of", "n_predict": 12, "temperature": 0}
    first = completion(server, **body)
    assert str(first["content"]).startswith(" Paris, France. It is the tallest")
    repeated = completion(server, **body)  # the sliding-window model restores its checkpoint
    fresh = completion(server, **body, cache_prompt=False)
    assert first["content"] == repeated["content"] == fresh["content"]
    assert repeated["timings"]["cache_n"] == first["tokens_evaluated"]  # type: ignore[index,operator]
    with httpx.stream("POST", server.url + "/completion", json={**body, "stream": True}, timeout=120) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert "".join(c["content"] for c in chunks) == first["content"]


def test_stop_string_on_real_text(server_factory, gemma_gguf: Path) -> None:  # type: ignore[no-untyped-def]
    server = server_factory(Settings.of(model=str(gemma_gguf), ctx_size=1024, parallel=1, threads=2))
    prompt = "The Eiffel Tower is located in the city of"
    full = str(completion(server, prompt=prompt, n_predict=12, temperature=0)["content"])
    stopped = completion(server, prompt=prompt, n_predict=12, temperature=0, stop=["France"])
    assert stopped["content"] == full[: full.index("France")] == " Paris, "
    assert (stopped["stop_type"], stopped["stopping_word"]) == ("word", "France")


@pytest.mark.slow  # about 10 s: a real model writing JSON under a schema until it ends
def test_constrained_output_from_a_real_model_ends(server_factory, gemma_gguf: Path) -> None:  # type: ignore[no-untyped-def]
    """Unbounded JSON numbers let a real model write ``10.5000000…`` until the limit; bounded ones end."""
    server = server_factory(Settings.of(model=str(gemma_gguf), ctx_size=2048, parallel=1, threads=2))
    ask = [{"role": "user", "content": "What is the weather in Paris? Answer in JSON."}]
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "temp_c": {"type": "number", "minimum": -50}},
        "required": ["city", "temp_c"],
    }
    body = {"messages": ask, "max_tokens": 80, "temperature": 0}
    format_ = {"type": "json_schema", "json_schema": {"name": "weather", "schema": schema}}
    response = httpx.post(server.url + "/v1/chat/completions", json={**body, "response_format": format_}, timeout=120)
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    answer = json.loads(choice["message"]["content"])
    assert answer["city"] == "Paris" and isinstance(answer["temp_c"], float) and answer["temp_c"] >= -50
    # Gemma has no LFM call tokens: the markers are plain text in the grammar and still parse.
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": schema}}
    response = httpx.post(
        server.url + "/v1/chat/completions",
        json={**body, "tools": [tool], "tool_choice": "required", "parallel_tool_calls": False},
        timeout=120,
    )
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "", choice["message"]["content"]
    call = choice["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"])["city"] == "Paris"
