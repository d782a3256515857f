"""Ollama's API on a server of one model, through Ollama's own Python client (``ollama`` on PyPI) over loopback.

Every answer is checked against the OpenAI route given the same request: the same greedy (or seeded) text and
the same prompt length show that messages, tools in the history, images, ``think``, ``format`` and ``options``
are read into the very prompt and sampling an OpenAI client would get.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import ollama
import pytest

from lfmserve.settings import Settings
from lfmserve.testing import image_bytes, wav_bytes
from tests.conftest import ServerThread, vl_settings

#: A template that thinks unless told not to (the switch llama-server and Ollama pass as ``enable_thinking``).
THINKING_TEMPLATE = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and not enable_thinking -%}<think></think>{%- endif -%}{%- endif -%}"
)
GREEDY = {"temperature": 0, "num_predict": 6}
ASK = [{"role": "user", "content": "Say hi."}]
#: The 400 for a ``keep_alive`` that is no finite duration, the value shown as Python writes it.
KEEP_ALIVE_REFUSED = (
    "Invalid value for 'keep_alive': expected seconds or a duration such as '5m', up to 292 years (got {})"
)
#: ``keep_alive`` values a router must refuse before they reach its pool, as JSON and as the 400 shows them.
BAD_KEEP_ALIVES = (
    ('"inf"', "'inf'"),
    ('"nan"', "'nan'"),
    ("1e12", "1000000000000.0"),
    ("[5]", "[5]"),
    ('{"m": 5}', "{'m': 5}"),
)


@pytest.fixture(scope="module")
def server(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    settings = Settings.of(
        model=str(tiny_gguf), ctx_size=4096, parallel=2, threads=2, embeddings=True, pooling="mean", ubatch_size=64
    )
    return server_factory(settings)


@pytest.fixture(scope="module")
def client(server: ServerThread) -> Iterator[ollama.Client]:
    with ollama.Client(host=server.url) as client:
        yield client


def openai_chat(server: ServerThread, messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    body = {"messages": messages, "temperature": 0, "max_tokens": 6, **fields}
    response = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_the_probes_and_the_listings(server: ServerThread, client: ollama.Client, tiny_gguf: Path) -> None:
    assert httpx.get(server.url + "/", headers={"Accept": "application/json"}).text == "Ollama is running"
    assert httpx.head(server.url + "/").status_code == 200
    assert httpx.get(server.url + "/api/version").json() == {"version": "0.12.6"}
    name = "tiny-lfm2.gguf:latest"
    details = {
        "parent_model": "",
        "format": "gguf",
        "family": "lfm2",
        "families": ["lfm2"],
        "parameter_size": "0M",
        "quantization_level": "F32",
    }
    listed = httpx.get(server.url + "/api/tags").json()["models"]
    assert len(listed) == 1 and listed[0]["details"] == details
    assert {key: listed[0][key] for key in ("name", "model", "size")} == {
        "name": name,
        "model": name,
        "size": tiny_gguf.stat().st_size,
    }
    assert len(listed[0]["digest"]) == 64 and listed[0]["modified_at"].endswith("Z")
    assert [model.model for model in client.list().models] == [name]
    loaded = client.ps().models
    assert [(m.model, m.context_length, m.size_vram) for m in loaded] == [(name, 2048, 0)]
    assert loaded[0].expires_at is not None and loaded[0].expires_at.year > 2200
    shown = client.show("tiny-lfm2.gguf")  # a bare name is :latest
    assert shown.capabilities == ["completion", "tools", "embedding"]
    assert shown.modelinfo is not None and shown.modelinfo["general.architecture"] == "lfm2"
    assert shown.modelinfo["lfm2.context_length"] == 2048
    assert shown.template is not None and "<|im_start|>" in shown.template
    assert client.pull(name).status == "success"
    pulled = httpx.post(server.url + "/api/pull", json={"model": name})  # streamed by default
    assert pulled.headers["content-type"] == "application/x-ndjson" and pulled.text == '{"status":"success"}\n'


def test_unknown_models_and_management_routes_answer_ollamas_error_shape(
    server: ServerThread, client: ollama.Client
) -> None:
    with pytest.raises(ollama.ResponseError) as missing:
        client.show("nope")
    assert (missing.value.error, missing.value.status_code) == ("model 'nope' not found", 404)
    with pytest.raises(ollama.ResponseError) as pull:
        client.pull("nope")
    assert pull.value.status_code == 404
    for method, path in (("DELETE", "/api/delete"), ("POST", "/api/copy"), ("POST", "/api/create")):
        response = httpx.request(method, server.url + path, json={"model": "x"})
        assert response.status_code == 501
        assert response.json() == {
            "error": f"{path} is not supported by lfmserve: it serves the models it was started with"
        }
    for body, error in (
        (b"{", "Invalid JSON body: EOF while parsing an object at line 1 column 1"),
        (b'{"messages": []}', "model is required"),
        (
            b'{"model": "m", "messages": [], "keep_alive": "soon"}',
            KEEP_ALIVE_REFUSED.format("'soon'"),
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "think": true}',
            '"m" does not support thinking',
        ),
    ):
        response = httpx.post(server.url + "/api/chat", content=body)
        assert (response.status_code, response.json()) == (400, {"error": error}), body


@pytest.mark.parametrize("path", ["/api/chat", "/api/generate", "/api/embed", "/api/embeddings"])
def test_a_keep_alive_that_is_no_finite_duration_is_a_400_and_ps_still_answers(server: ServerThread, path: str) -> None:
    """The values a router must refuse before they reach its pool are refused here too, by the same body models."""
    for raw, shown in BAD_KEEP_ALIVES:
        body = f'{{"model": "m", "prompt": "x", "input": "x", "keep_alive": {raw}}}'
        response = httpx.post(server.url + path, content=body, timeout=60)
        assert (response.status_code, response.json()) == (400, {"error": KEEP_ALIVE_REFUSED.format(shown)}), raw
    assert httpx.get(server.url + "/api/ps", timeout=60).status_code == 200


def test_chat_whole_and_streamed_agree_with_the_openai_route(server: ServerThread, client: ollama.Client) -> None:
    whole = client.chat(model="anything", messages=ASK, options=GREEDY)
    reference = openai_chat(server, ASK)
    assert whole.message.content == reference["choices"][0]["message"]["content"]
    assert (whole.model, whole.done, whole.done_reason) == ("anything", True, "length")
    assert (whole.prompt_eval_count, whole.eval_count) == (reference["usage"]["prompt_tokens"], 6)
    assert whole.total_duration is not None and whole.eval_duration is not None
    assert whole.total_duration > whole.eval_duration > 0
    parts = list(client.chat(model="anything", messages=ASK, options=GREEDY, stream=True))
    assert "".join(part.message.content or "" for part in parts) == whole.message.content
    assert [part.done for part in parts] == [False] * (len(parts) - 1) + [True]
    assert (parts[-1].done_reason, parts[-1].eval_count, parts[-1].message.content) == ("length", 6, "")
    raw = httpx.post(server.url + "/api/chat", json={"model": "m", "messages": ASK, "options": GREEDY})
    assert raw.headers["content-type"] == "application/x-ndjson"  # stream unless told otherwise
    assert [json.loads(line)["done"] for line in raw.text.splitlines()] == [part.done for part in parts]


def test_tools_in_the_history_render_as_the_openai_history_does(server: ServerThread, client: ollama.Client) -> None:
    tool = {"type": "function", "function": {"name": "look", "description": "Look", "parameters": {"type": "object"}}}
    ollama_history = [
        {"role": "user", "content": "What colour is the sky?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "look", "arguments": {"at": "sky"}}}],
        },
        {"role": "tool", "content": "blue", "tool_name": "look"},
    ]
    openai_history = [
        ollama_history[0],
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "look", "arguments": '{"at":"sky"}'}}],
        },
        {"role": "tool", "content": "blue", "name": "look"},
    ]
    answer = client.chat(model="m", messages=ollama_history, tools=[tool], options=GREEDY)
    reference = openai_chat(server, openai_history, tools=[tool])
    assert answer.prompt_eval_count == reference["usage"]["prompt_tokens"]
    assert answer.message.content == reference["choices"][0]["message"]["content"]


def test_format_constrains_the_answer_as_response_format_does(server: ServerThread, client: ollama.Client) -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }
    for fmt, response_format in (
        ("json", {"type": "json_object"}),
        (schema, {"type": "json_schema", "json_schema": {"name": "schema", "schema": schema}}),
    ):
        answer = client.chat(model="m", messages=ASK, format=fmt, options={"temperature": 0, "num_predict": 24})
        reference = openai_chat(server, ASK, max_tokens=24, response_format=response_format)
        assert answer.message.content == reference["choices"][0]["message"]["content"]
        assert answer.message.content and answer.message.content.startswith("{")
    whole = client.chat(model="m", messages=ASK, format=schema, options={"temperature": 0, "num_predict": 200})
    assert whole.done_reason == "stop" and list(json.loads(whole.message.content or "")) == ["n"]


def test_options_sample_as_the_openai_fields_of_the_same_names(server: ServerThread, client: ollama.Client) -> None:
    options = {"temperature": 1.5, "top_k": 20, "top_p": 0.9, "min_p": 0.01, "seed": 7, "repeat_penalty": 1.1}
    answer = client.chat(model="m", messages=ASK, options={**options, "num_predict": 8, "num_ctx": 8192.0})
    openai_fields = {**options, "max_tokens": 8}
    reference = openai_chat(server, ASK, **openai_fields)
    assert answer.message.content == reference["choices"][0]["message"]["content"]
    stop = (reference["choices"][0]["message"]["content"] or "")[3:5]
    stopped = client.chat(model="m", messages=ASK, options={**options, "num_predict": 8, "stop": [stop]})
    assert stopped.done_reason == "stop" and stop not in (stopped.message.content or "")


def test_generate_renders_the_prompt_as_a_user_turn_or_sends_it_raw(
    server: ServerThread, client: ollama.Client
) -> None:
    generated = client.generate(model="m", prompt="Say hi.", system="Be brief.", options=GREEDY)
    reference = openai_chat(server, [{"role": "system", "content": "Be brief."}, *ASK])
    assert generated.response == reference["choices"][0]["message"]["content"]
    assert generated.prompt_eval_count == reference["usage"]["prompt_tokens"]
    streamed = list(client.generate(model="m", prompt="Say hi.", system="Be brief.", options=GREEDY, stream=True))
    assert "".join(part.response or "" for part in streamed) == generated.response
    raw = client.generate(model="m", prompt="Once upon", raw=True, options=GREEDY)
    completion = httpx.post(server.url + "/completion", json={"prompt": "Once upon", "temperature": 0, "n_predict": 6})
    assert raw.response == completion.json()["content"]
    assert raw.prompt_eval_count == completion.json()["tokens_evaluated"]
    loaded = client.generate(model="m", prompt="")
    assert (loaded.done, loaded.done_reason, loaded.response) == (True, "load", "")


def test_an_unload_request_leaves_the_one_model_loaded_and_says_so(server: ServerThread, client: ollama.Client) -> None:
    answer = client.chat(model="m", messages=[], keep_alive=0)
    assert (answer.done, answer.done_reason, answer.message.content) == (True, "load", "")
    assert len(client.ps().models) == 1


def test_embed_is_normalised_like_ollamas_and_embeddings_is_the_raw_vector(
    server: ServerThread, client: ollama.Client
) -> None:
    embedded = client.embed(model="m", input=["the sky", "is blue"])
    reference = httpx.post(server.url + "/v1/embeddings", json={"input": ["the sky", "is blue"]}).json()
    vectors = np.array(embedded.embeddings)
    assert np.allclose(vectors, [item["embedding"] for item in reference["data"]], atol=1e-6)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert embedded.prompt_eval_count == reference["usage"]["prompt_tokens"]
    cut = client.embed(model="m", input="the sky", dimensions=8).embeddings[0]
    assert len(cut) == 8 and np.isclose(np.linalg.norm(cut), 1.0)
    legacy = client.embeddings(model="m", prompt="the sky").embedding
    native = httpx.post(server.url + "/embedding", json={"content": "the sky", "embd_normalize": -1}).json()
    assert np.allclose(legacy, native[0]["embedding"][0], atol=1e-6)


def test_embed_cuts_a_long_input_to_the_batch_unless_truncate_is_false(server: ServerThread) -> None:
    long_text = "the sky is blue " * 200
    cut = httpx.post(server.url + "/api/embed", json={"model": "m", "input": long_text}).json()
    assert cut["prompt_eval_count"] == 64 and len(cut["embeddings"]) == 1
    refused = httpx.post(server.url + "/api/embed", json={"model": "m", "input": long_text, "truncate": False})
    assert refused.status_code == 400 and "too large to process" in refused.json()["error"]


@pytest.fixture(scope="module")
def vl_server(server_factory: Callable[..., ServerThread], vl_gguf: Path, mmproj_gguf: Path) -> ServerThread:
    return server_factory(vl_settings(vl_gguf, mmproj_gguf, embeddings=True, pooling="mean"))


@pytest.fixture
def vl_client(vl_server: ServerThread) -> Iterator[ollama.Client]:
    with ollama.Client(host=vl_server.url) as client:
        yield client


def test_images_and_audio_go_where_their_markers_say(vl_server: ServerThread, vl_client: ollama.Client) -> None:
    client = vl_client
    png, webp = image_bytes(64, 48, seed=1, format="PNG"), image_bytes(64, 48, seed=1, format="WEBP")
    wav = wav_bytes(0.5)
    b64 = {name: base64.b64encode(data).decode() for name, data in (("png", png), ("webp", webp), ("wav", wav))}
    shown = client.show("tiny-lfm2-vl.gguf")
    assert shown.capabilities == ["completion", "tools", "vision", "audio", "embedding"]
    answer = client.chat(
        model="m",
        messages=[{"role": "user", "content": "Frame [img] then sound", "images": [png, wav]}],
        options=GREEDY,
    )
    parts = [
        {"type": "text", "text": "Frame "},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64["png"]}},
        {"type": "text", "text": " then sound"},
    ]
    audio = {"type": "input_audio", "input_audio": {"data": b64["wav"], "format": "wav"}}
    reference = openai_chat(vl_server, [{"role": "user", "content": [audio, *parts]}])
    assert answer.prompt_eval_count == reference["usage"]["prompt_tokens"]
    assert answer.message.content == reference["choices"][0]["message"]["content"]
    webp_answer = client.generate(model="m", prompt="What is it?", images=[webp], options=GREEDY)
    webp_part = {"type": "image_url", "image_url": {"url": "data:image/webp;base64," + b64["webp"]}}
    webp_reference = openai_chat(
        vl_server, [{"role": "user", "content": [webp_part, {"type": "text", "text": "What is it?"}]}]
    )
    assert webp_answer.prompt_eval_count == webp_reference["usage"]["prompt_tokens"]
    assert webp_answer.response == webp_reference["choices"][0]["message"]["content"]
    image_vector = httpx.post(vl_server.url + "/api/embed", json={"model": "m", "input": [{"image": b64["png"]}]})
    assert image_vector.status_code == 200 and len(image_vector.json()["embeddings"]) == 1


@pytest.fixture(scope="module")
def thinking_server(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> ServerThread:
    template = tmp_path_factory.mktemp("thinking") / "thinking.jinja"
    template.write_text(THINKING_TEMPLATE)
    return server_factory(
        Settings.of(model=str(tiny_gguf), ctx_size=1024, parallel=1, chat_template_file=str(template))
    )


def test_think_switches_the_templates_thinking(thinking_server: ServerThread, request: pytest.FixtureRequest) -> None:
    client = ollama.Client(host=thinking_server.url)
    request.addfinalizer(client.close)
    assert client.show("tiny-lfm2.gguf").capabilities == ["completion", "thinking"]
    for think, kwargs in ((False, {"enable_thinking": False}), (True, {"enable_thinking": True}), ("low", None)):
        answer = client.chat(model="m", messages=ASK, think=think, options=GREEDY)
        fields = {"chat_template_kwargs": kwargs or {"enable_thinking": True, "reasoning_effort": "low"}}
        reference = openai_chat(thinking_server, ASK, **fields)
        assert answer.prompt_eval_count == reference["usage"]["prompt_tokens"], think
        message = reference["choices"][0]["message"]
        assert (answer.message.content, answer.message.thinking) == (
            message["content"],
            message.get("reasoning_content"),
        )
    off, on = (client.chat(model="m", messages=ASK, think=t, options=GREEDY) for t in (False, True))
    assert off.prompt_eval_count is not None and on.prompt_eval_count is not None
    assert off.prompt_eval_count > on.prompt_eval_count  # "<think></think>" is in the prompt only when off


def test_the_api_key_guards_the_models_and_leaves_the_probes_public(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path
) -> None:
    keyed = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, api_key=("k",), ui=False))
    for path in ("/", "/api/version"):
        assert httpx.get(keyed.url + path, headers={"Accept": "application/json"}).status_code == 200, path
    listing = httpx.get(keyed.url + "/api/tags")  # which models a server has is not public (llama-server's rule)
    assert (listing.status_code, listing.json()) == (401, {"error": "Invalid API Key"})
    refused = httpx.post(keyed.url + "/api/chat", json={"model": "m", "messages": ASK})
    assert (refused.status_code, refused.json()) == (401, {"error": "Invalid API Key"})
    with ollama.Client(host=keyed.url) as anonymous, pytest.raises(ollama.ResponseError) as caught:
        anonymous.show("m")
    assert caught.value.status_code == 401
    with ollama.Client(host=keyed.url, headers={"Authorization": "Bearer k"}) as client:
        assert client.chat(model="m", messages=ASK, options=GREEDY).done
