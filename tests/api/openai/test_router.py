"""The HTTP API over real loopback HTTP: the seed's requests, the OpenAI client, raw SSE, shapes."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from lfmserve.chat.serving import Serving
from lfmserve.models.loader import load_serving
from lfmserve.settings import Settings
from lfmserve.testing import TinyLfm2, write_lfm2_gguf
from tests.conftest import ServerThread, fixture_template, serve

SEED_CHAT = {
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is machine learning?"},
    ],
    "temperature": 0.1,
    "top_k": 50,
    "repeat_penalty": 1.05,
    "max_tokens": 512,
}
GREEDY = {"temperature": 0, "max_tokens": 16}
TIMINGS_KEYS = {
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
}


def post(server: ServerThread, path: str, body: Any, **kwargs: Any) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60, **kwargs)


def sse_events(server: ServerThread, path: str, body: dict[str, Any]) -> list[str]:
    """Read an SSE response line by line, the way the seed's fetch reader does."""
    with httpx.stream("POST", server.url + path, json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return [line[6:] for line in response.iter_lines() if line.startswith("data: ")]


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


def test_timings_per_token_puts_timings_on_every_chunk(tiny_server: ServerThread) -> None:
    body = {**SEED_CHAT, **GREEDY, "stream": True, "timings_per_token": True}
    chunks = [json.loads(e) for e in sse_events(tiny_server, "/v1/chat/completions", body)[:-1]]
    content = [c for c in chunks if c["choices"][0]["delta"].get("content")]
    assert content and all(set(c["timings"]) == TIMINGS_KEYS for c in content)
    assert [c["timings"]["predicted_n"] for c in content] == sorted(c["timings"]["predicted_n"] for c in content)


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


def test_openai_client_async(tiny_server: ServerThread) -> None:
    async def main() -> list[str]:
        client = openai.AsyncOpenAI(base_url=tiny_server.url + "/v1", api_key="x")
        calls = [
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"Hi {i}"}], temperature=0, max_tokens=6
            )
            for i in range(3)
        ]
        results = await asyncio.gather(*calls)
        await client.close()
        return [r.choices[0].message.content or "" for r in results]

    texts = asyncio.run(main())
    assert len(texts) == 3 and all(isinstance(t, str) for t in texts)


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


def test_models_and_props(tiny_server: ServerThread) -> None:
    models = httpx.get(tiny_server.url + "/v1/models").json()
    entry = models["data"][0]
    assert models["object"] == "list" and entry["id"] == "tiny-lfm2.gguf" and entry["owned_by"] == "llamacpp"
    assert entry["architecture"]["input_modalities"] == ["text"] and entry["aliases"] == []
    assert entry["meta"]["n_ctx"] == 512 and entry["meta"]["n_vocab"] == 475 and entry["meta"]["vocab_type"] == 2
    assert {"n_ctx_train", "n_params", "size", "n_embd"} <= set(entry["meta"])
    assert httpx.get(tiny_server.url + "/models").json()["data"][0]["id"] == "tiny-lfm2.gguf"
    props = httpx.get(tiny_server.url + "/props").json()
    assert props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] == 512  # 2048 / 4 slots
    assert props["bos_token"] == "<|startoftext|>" and props["eos_token"] == "<|im_end|>"
    assert props["chat_template"].startswith("{{- bos_token -}}")
    assert props["chat_template_caps"]["supports_tools"] is True
    assert props["model_path"].endswith("tiny-lfm2.gguf") and props["modalities"] == {"vision": False, "audio": False}
    model = props["model"]
    assert (model["architecture"], model["is_hybrid"], model["is_recurrent"], model["vocab_type"]) == (
        "lfm2",
        True,
        False,
        "BPE",
    )
    assert model["n_ctx_train"] == 4096 and model["n_vocab"] == 475 and model["name"] == "Tiny-LFM2-Test"


@pytest.fixture(scope="module")
def named_models(models_dir: Path) -> dict[str, Path]:
    return {
        "instruct": write_lfm2_gguf(
            models_dir / "instruct.gguf",
            TinyLfm2(seed=5, name="LFM2.5 1.2B Instruct", basename="LFM2.5", size_label="1.2B"),
        ),
        "keys": write_lfm2_gguf(
            models_dir / "keys.gguf", TinyLfm2(seed=5, name="LFM2.5 1.2B Instruct", sampling={"temp": 0.7, "top_k": 11})
        ),
    }


def test_props_show_lfm_family_defaults_and_gguf_keys_override_them(
    server_factory: Callable[..., ServerThread], named_models: dict[str, Path]
) -> None:
    instruct = server_factory(Settings(model=str(named_models["instruct"]), ctx_size=512, parallel=1))
    params = httpx.get(instruct.url + "/props").json()["default_generation_settings"]["params"]
    assert (params["temperature"], params["top_k"], params["top_p"], params["min_p"], params["repeat_penalty"]) == (
        0.1,
        50,
        1.0,
        0.0,
        1.05,
    )
    keys = server_factory(Settings(model=str(named_models["keys"]), ctx_size=512, parallel=1, min_p=0.2))
    props = httpx.get(keys.url + "/props").json()
    params = props["default_generation_settings"]["params"]
    assert (params["temperature"], params["top_k"], params["repeat_penalty"], params["min_p"]) == (0.7, 11, 1.05, 0.2)
    assert props["sampling_sources"]["temperature"] == "GGUF general.sampling"
    assert props["sampling_sources"]["min_p"] == "command line"


def test_native_completion_and_its_stream_without_done(tiny_server: ServerThread) -> None:
    body = {"prompt": "Once upon a time", "n_predict": 8, "temperature": 0}
    data = post(tiny_server, "/completion", body).json()
    assert data["stop"] is True and data["tokens_predicted"] == 8 and data["stop_type"] == "limit"
    tokens = post(tiny_server, "/tokenize", {"content": "Once upon a time", "add_special": True}).json()["tokens"]
    assert data["prompt"] == "<|startoftext|>Once upon a time" and data["tokens_evaluated"] == len(tokens)
    assert set(data["timings"]) == TIMINGS_KEYS and "generation_settings" in data
    events = sse_events(tiny_server, "/completion", {**body, "stream": True})
    assert "[DONE]" not in events
    chunks = [json.loads(e) for e in events]
    assert all(c["stop"] is False for c in chunks[:-1]) and chunks[-1]["stop"] is True
    assert "".join(c["content"] for c in chunks) == data["content"]
    by_ids = post(tiny_server, "/completion", {**body, "prompt": tokens}).json()
    assert by_ids["content"] == data["content"]


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


def test_tokenize_detokenize_apply_template(tiny_server: ServerThread) -> None:
    tokens = post(tiny_server, "/tokenize", {"content": "<|im_start|>Hi"}).json()["tokens"]
    assert tokens[0] == 6 and post(tiny_server, "/detokenize", {"tokens": tokens}).json() == {
        "content": "<|im_start|>Hi"
    }
    assert post(tiny_server, "/tokenize", {"content": "Hi", "add_special": True}).json()["tokens"][0] == 1
    literal = post(tiny_server, "/tokenize", {"content": "<|im_start|>", "parse_special": False}).json()["tokens"]
    assert 6 not in literal and len(literal) > 1
    pieces = post(tiny_server, "/tokenize", {"content": "<|im_end|>x", "with_pieces": True}).json()["tokens"]
    assert pieces[0] == {"id": 7, "piece": "<|im_end|>"}
    prompt = post(tiny_server, "/apply-template", {"messages": [{"role": "user", "content": "Hi"}]}).json()["prompt"]
    assert prompt == "<|startoftext|><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


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


INVALID_REQUESTS: list[tuple[str, str, Any, str]] = [
    ("malformed JSON", "/v1/chat/completions", b'{"messages": [', "invalid_request_error"),
    ("body not an object", "/v1/chat/completions", b"[1, 2]", "invalid_request_error"),
    ("missing messages", "/v1/chat/completions", {"temperature": 0.1}, "invalid_request_error"),
    ("empty messages", "/v1/chat/completions", {"messages": []}, "invalid_request_error"),
    (
        "unknown role",
        "/v1/chat/completions",
        {"messages": [{"role": "wizard", "content": "x"}]},
        "invalid_request_error",
    ),
    (
        "content wrong type",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": 5}]},
        "invalid_request_error",
    ),
    ("user without content", "/v1/chat/completions", {"messages": [{"role": "user"}]}, "invalid_request_error"),
    ("temperature a string", "/v1/chat/completions", {**SEED_CHAT, "temperature": "hot"}, "invalid_request_error"),
    ("negative temperature", "/v1/chat/completions", {**SEED_CHAT, "temperature": -1}, "invalid_request_error"),
    ("top_p above 1", "/v1/chat/completions", {**SEED_CHAT, "top_p": 1.5}, "invalid_request_error"),
    ("min_p negative", "/v1/chat/completions", {**SEED_CHAT, "min_p": -0.1}, "invalid_request_error"),
    ("top_k a float", "/v1/chat/completions", {**SEED_CHAT, "top_k": 2.5}, "invalid_request_error"),
    ("max_tokens below -1", "/v1/chat/completions", {**SEED_CHAT, "max_tokens": -5}, "invalid_request_error"),
    ("stream not a bool", "/v1/chat/completions", {**SEED_CHAT, "stream": "yes"}, "invalid_request_error"),
    ("stop wrong type", "/v1/chat/completions", {**SEED_CHAT, "stop": 7}, "invalid_request_error"),
    ("n above 1", "/v1/chat/completions", {**SEED_CHAT, "n": 2}, "invalid_request_error"),
    (
        "presence penalty out of range",
        "/v1/chat/completions",
        {**SEED_CHAT, "presence_penalty": 3},
        "invalid_request_error",
    ),
    (
        "logit bias token out of vocab",
        "/v1/chat/completions",
        {**SEED_CHAT, "logit_bias": {"99999": 1}},
        "invalid_request_error",
    ),
    ("id_slot beyond the slots", "/v1/chat/completions", {**SEED_CHAT, "id_slot": 17}, "invalid_request_error"),
    (
        "image without a projector",
        "/v1/chat/completions",
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}
            ]
        },
        "invalid_request_error",
    ),
    (
        "bad tool call arguments",
        "/v1/chat/completions",
        {
            "messages": [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{oops"}}],
                },
            ]
        },
        "invalid_request_error",
    ),
    (
        "prompt too long",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "word " * 3000}]},
        "exceed_context_size_error",
    ),
    ("completion without prompt", "/completion", {"n_predict": 3}, "invalid_request_error"),
    ("completion prompt token out of vocab", "/completion", {"prompt": [1, 70000]}, "invalid_request_error"),
    ("tokenize content not a string", "/tokenize", {"content": 12}, "invalid_request_error"),
    ("detokenize unknown token", "/detokenize", {"tokens": [1, 123456]}, "invalid_request_error"),
]


@pytest.mark.parametrize(("name", "path", "body", "error_type"), INVALID_REQUESTS, ids=[r[0] for r in INVALID_REQUESTS])
def test_invalid_input_gets_a_4xx_with_the_error_shape(
    tiny_server: ServerThread, name: str, path: str, body: Any, error_type: str
) -> None:
    kwargs = (
        {"content": body, "headers": {"Content-Type": "application/json"}}
        if isinstance(body, bytes)
        else {"json": body}
    )
    response = httpx.post(tiny_server.url + path, timeout=60, **kwargs)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == 400 and error["type"] == error_type and error["message"]
    assert "Traceback" not in response.text
    if error_type == "exceed_context_size_error":
        assert error["n_ctx"] == 512 and error["n_prompt_tokens"] > 2048


def test_every_invalid_request_kind_is_listed() -> None:
    assert len(INVALID_REQUESTS) >= 15


def test_a_failing_template_answers_400_with_its_message(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    template = tmp_path_factory.mktemp("tpl") / "strict.jinja"
    template.write_text(
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations must start "
        "with a user message') }}{% endif %}{{ messages[0]['content'] }}"
    )
    server = server_factory(Settings(model=str(tiny_gguf), ctx_size=512, parallel=1, chat_template_file=str(template)))
    response = post(server, "/v1/chat/completions", {"messages": [{"role": "assistant", "content": "x"}]})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Chat template error: Conversations must start with a user message"
    assert post(server, "/apply-template", {"messages": [{"role": "user", "content": "ok"}]}).json() == {"prompt": "ok"}


def test_unknown_route_is_404_with_the_error_shape(tiny_server: ServerThread) -> None:
    response = httpx.get(tiny_server.url + "/v1/nothing")
    assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error"


def test_bad_requests_do_not_disturb_requests_in_flight(tiny_server: ServerThread) -> None:
    good = {**SEED_CHAT, "temperature": 0, "max_tokens": 40}
    expected = post(tiny_server, "/v1/chat/completions", good).json()["choices"][0]["message"]["content"]
    results: list[str] = []

    def client() -> None:
        results.append(post(tiny_server, "/v1/chat/completions", good).json()["choices"][0]["message"]["content"])

    threads = [threading.Thread(target=client) for _ in range(3)]
    for t in threads:
        t.start()
    for _, path, body, _ in INVALID_REQUESTS:
        kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
        assert httpx.post(tiny_server.url + path, timeout=60, **kwargs).status_code == 400
    for t in threads:
        t.join(timeout=60)
    assert results == [expected] * 3


def test_api_keys(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    server = server_factory(Settings(model=str(tiny_gguf), ctx_size=512, parallel=1, api_key=("k1", "k2")))
    chat = {"messages": [{"role": "user", "content": "Hi"}], **GREEDY}
    for headers in ({}, {"Authorization": "Bearer nope"}, {"X-Api-Key": "k3"}):
        response = post(server, "/v1/chat/completions", chat, headers=headers)
        assert response.status_code == 401
        assert response.json()["error"] == {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}
    assert post(server, "/v1/chat/completions", chat, headers={"Authorization": "Bearer k2"}).status_code == 200
    assert post(server, "/v1/chat/completions", chat, headers={"X-Api-Key": "k1"}).status_code == 200
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.get(server.url + "/v1/models").status_code == 200
    assert httpx.get(server.url + "/props").status_code == 401
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k1")
    assert client.chat.completions.create(model="m", messages=chat["messages"], max_tokens=2).usage is not None


def test_health_is_503_until_the_model_has_loaded(tiny_gguf: Path) -> None:
    settings = Settings(model=str(tiny_gguf), ctx_size=512, parallel=1)
    release = threading.Event()

    def slow_load() -> Serving:
        release.wait(30)
        return load_serving(settings, str(tiny_gguf))

    server = serve(settings, slow_load)
    try:
        for path in ("/health", "/v1/models", "/props"):
            response = httpx.get(server.url + path)
            assert response.status_code == 503
            assert response.json() == {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
        release.set()
        server.wait_ready()
        assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    finally:
        release.set()
        server.stop()


def test_fixture_template_via_chat_template_file(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    server = server_factory(
        Settings(
            model=str(tiny_gguf),
            ctx_size=512,
            parallel=1,
            chat_template_file=str(fixture_template("lfm2.5-instruct.jinja")),
        )
    )
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    prompt = post(server, "/apply-template", {"messages": [{"role": "user", "content": "Hi"}], "tools": tools}).json()
    assert prompt["prompt"] == (
        '<|startoftext|><|im_start|>system\nList of tools: [{"type": "function", "function": '
        '{"name": "f", "parameters": {"type": "object"}}}]<|im_end|>\n<|im_start|>user\nHi'
        "<|im_end|>\n<|im_start|>assistant\n"
    )


def test_no_jinja_uses_llama_cpp_builtin_formats(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    server = server_factory(Settings(model=str(tiny_gguf), ctx_size=512, parallel=1, jinja=False))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    prompt = post(server, "/apply-template", {"messages": messages}).json()["prompt"]
    # llama.cpp recognises the LFM template as ChatML; its built-in ChatML adds no BOS text
    assert prompt == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    tools = [{"type": "function", "function": {"name": "f"}}]
    response = post(server, "/v1/chat/completions", {"messages": messages, "tools": tools})
    assert response.status_code == 400 and response.json()["error"]["message"] == "tools param requires --jinja flag"
    assert post(server, "/v1/chat/completions", {"messages": messages, "max_tokens": 2}).status_code == 200
