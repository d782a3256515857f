"""OpenAI's routes over real loopback HTTP: the seed's requests, the OpenAI client, raw SSE, exact shapes."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess

import httpx
import openai
import pytest

from tests.conftest import GREEDY, SEED_CHAT, TIMINGS_KEYS, ServerThread, post, sse_events


def test_the_seeds_curl_request(tiny_server: ServerThread) -> None:
    response = post(tiny_server, "/v1/chat/completions", SEED_CHAT)
    assert response.status_code == 200
    data = response.json()
    assert data["object"] == "chat.completion" and data["model"] == "tiny-lfm2.gguf"
    assert data["id"].startswith("chatcmpl-")
    choice = data["choices"][0]
    assert choice["index"] == 0 and choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str) and choice["finish_reason"] in ("stop", "length")
    usage = data["usage"]
    assert usage["prompt_tokens"] == 40 and usage["total_tokens"] == 40 + usage["completion_tokens"]
    assert set(usage["prompt_tokens_details"]) == {"cached_tokens"}
    assert set(data["timings"]) == TIMINGS_KEYS and data["timings"]["predicted_n"] == usage["completion_tokens"]


def test_greedy_is_identical_between_stream_and_non_stream(tiny_server: ServerThread) -> None:
    body = {**SEED_CHAT, **GREEDY}
    whole = post(tiny_server, "/v1/chat/completions", body).json()
    again = post(tiny_server, "/v1/chat/completions", body).json()
    events = sse_events(tiny_server, "/v1/chat/completions", {**body, "stream": True})
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert whole["choices"][0]["message"]["content"] == again["choices"][0]["message"]["content"] == streamed
    assert whole["usage"]["completion_tokens"] == 16


def test_stream_chunk_sequence_matches_llama_server(tiny_server: ServerThread) -> None:
    body = {**SEED_CHAT, **GREEDY, "stream": True, "stream_options": {"include_usage": True}}
    chunks = [json.loads(e) for e in sse_events(tiny_server, "/v1/chat/completions", body)[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    finish, usage_chunk = chunks[-2], chunks[-1]
    assert finish["choices"] == [{"finish_reason": "length", "index": 0, "delta": {}}]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 16
    assert set(usage_chunk["timings"]) == TIMINGS_KEYS
    assert all("timings" not in c for c in chunks[:-1])
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])


def test_timings_per_token_puts_timings_on_each_steps_last_chunk(tiny_server: ServerThread) -> None:
    body = {**SEED_CHAT, **GREEDY, "stream": True, "timings_per_token": True, "max_tokens": 6}
    chunks = [json.loads(e) for e in sse_events(tiny_server, "/v1/chat/completions", body)[:-1]]
    # llama-server's: the role chunk has none; each step's last chunk has them (the last step's is the finish).
    assert "timings" not in chunks[0] and chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    *content, finish = chunks[1:]
    assert finish["choices"][0]["finish_reason"] == "length" and finish["timings"]["predicted_n"] == 6
    timed = [c["timings"]["predicted_n"] for c in content[:-1]]  # the last may share the final step
    assert timed == sorted(set(timed)) and all(n < 6 for n in timed) and len(timed) >= 3
    assert all(set(c["timings"]) == TIMINGS_KEYS for c in [*content[:-1], finish])


def test_openai_client_sync_stream_and_extra_body(tiny_server: ServerThread) -> None:
    client = openai.OpenAI(base_url=tiny_server.url + "/v1", api_key="not-needed")
    response = client.chat.completions.create(
        model="lfm2.5-1.2b-instruct",
        messages=SEED_CHAT["messages"],
        temperature=0,
        max_tokens=12,
        extra_body={"top_k": 50, "repeat_penalty": 1.05},
    )
    text = response.choices[0].message.content
    assert response.usage is not None and response.usage.completion_tokens == 12
    assert response.choices[0].finish_reason == "length"
    stream = client.chat.completions.create(
        model="anything",
        messages=SEED_CHAT["messages"],
        temperature=0,
        max_tokens=12,
        stream=True,
        extra_body={"top_k": 50, "repeat_penalty": 1.05},
    )
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == text


def test_openai_client_async_gives_each_request_its_own_answer(tiny_server: ServerThread) -> None:
    """Three concurrent greedy requests, batched together, each answer as the same request made alone.

    Each request favours another token (the random model answers every prompt alike), so a mixed-up answer shows.
    """
    requests = [
        {"messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "max_tokens": 8, "logit_bias": {token: 5}}
        for token in ("100", "200", "300")
    ]

    async def main() -> list[str]:
        client = openai.AsyncOpenAI(base_url=tiny_server.url + "/v1", api_key="x")
        results = await asyncio.gather(*(client.chat.completions.create(model="m", **r) for r in requests))
        await client.close()
        return [r.choices[0].message.content or "" for r in results]

    alone = [post(tiny_server, "/v1/chat/completions", r).json()["choices"][0]["message"]["content"] for r in requests]
    assert asyncio.run(main()) == alone
    assert len(set(alone)) == 3  # different prompts: a mixed-up answer would show


def test_javascript_fetch_sse_reader(tiny_server: ServerThread) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    script = """
const res = await fetch(process.argv[1] + "/v1/chat/completions", {method: "POST",
  headers: {"Content-Type": "application/json"},
  body: JSON.stringify({messages: [{role: "user", content: "Write a haiku about the ocean."}],
    temperature: 0, top_k: 50, repeat_penalty: 1.05, max_tokens: 10, stream: true})});
const reader = res.body.getReader(); const decoder = new TextDecoder(); let buffer = ""; let out = "";
while (true) { const {value, done} = await reader.read(); if (done) break;
  buffer += decoder.decode(value, {stream: true}); const lines = buffer.split("\\n"); buffer = lines.pop();
  for (const line of lines) { if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
    const delta = JSON.parse(line.slice(6)).choices[0].delta.content; if (delta) out += delta; } }
process.stdout.write(JSON.stringify(out));
"""
    js = subprocess.run(
        [node, "--input-type=module", "-e", script, tiny_server.url], capture_output=True, text=True, timeout=60
    )
    assert js.returncode == 0, js.stderr
    body = {
        "messages": [{"role": "user", "content": "Write a haiku about the ocean."}],
        "temperature": 0,
        "top_k": 50,
        "repeat_penalty": 1.05,
        "max_tokens": 10,
    }
    assert (
        json.loads(js.stdout)
        == post(tiny_server, "/v1/chat/completions", body).json()["choices"][0]["message"]["content"]
    )


def test_models_lists_the_one_model_with_its_meta(tiny_server: ServerThread) -> None:
    models = httpx.get(tiny_server.url + "/v1/models").json()
    entry = models["data"][0]
    assert isinstance(entry.pop("created"), int)
    meta = entry.pop("meta")
    assert entry == {
        "id": "tiny-lfm2.gguf",
        "aliases": [],
        "tags": [],
        "object": "model",
        "owned_by": "llamacpp",
        "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
    }
    assert {k: meta[k] for k in ("vocab_type", "n_vocab", "n_ctx", "n_ctx_train", "n_embd")} == {
        "vocab_type": 2,
        "n_vocab": 475,
        "n_ctx": 512,  # 2048 over 4 slots
        "n_ctx_train": 4096,
        "n_embd": 64,
    }
    assert (
        meta["n_params"] > 0
        and meta["size"] > 0
        and set(meta) == {"vocab_type", "n_vocab", "n_ctx", "n_ctx_train", "n_embd", "n_params", "size"}
    )
    assert models["object"] == "list" and models["models"] == [
        {"name": "tiny-lfm2.gguf", "model": "tiny-lfm2.gguf", "type": "model", "capabilities": ["completion"]}
    ]
    assert httpx.get(tiny_server.url + "/models").json()["data"][0]["id"] == "tiny-lfm2.gguf"


def test_openai_completions(tiny_server: ServerThread) -> None:
    client = openai.OpenAI(base_url=tiny_server.url + "/v1", api_key="x")
    completion = client.completions.create(model="m", prompt="Once upon a time", max_tokens=8, temperature=0)
    native = post(tiny_server, "/completion", {"prompt": "Once upon a time", "n_predict": 8, "temperature": 0}).json()
    assert completion.object == "text_completion" and completion.choices[0].text == native["content"]
    assert completion.usage is not None and completion.usage.completion_tokens == 8
    events = sse_events(
        tiny_server,
        "/v1/completions",
        {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "stream": True},
    )
    assert events[-1] == "[DONE]"
    assert "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]) == native["content"]


def test_bos_is_not_doubled_and_text_parts_are_accepted(tiny_server: ServerThread) -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], **GREEDY}
    data = post(tiny_server, "/v1/chat/completions", body).json()
    expected = post(
        tiny_server, "/tokenize", {"content": "<|startoftext|><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"}
    ).json()["tokens"]
    assert expected[:2] == [1, 6] and data["usage"]["prompt_tokens"] == len(expected)


def test_cached_tokens_count_a_continued_conversation(tiny_server: ServerThread) -> None:
    messages = [{"role": "user", "content": "My name is Ada."}]
    first = post(tiny_server, "/v1/chat/completions", {"messages": messages, **GREEDY, "id_slot": 3}).json()
    messages += [{"role": "assistant", "content": "Hello Ada."}, {"role": "user", "content": "What is my name?"}]
    second = post(tiny_server, "/v1/chat/completions", {"messages": messages, **GREEDY, "id_slot": 3}).json()
    shared = first["usage"]["prompt_tokens"]  # the checkpoint at the end of the first prompt
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == shared
    assert second["timings"]["cache_n"] == shared
    assert second["timings"]["prompt_n"] == second["usage"]["prompt_tokens"] - shared
