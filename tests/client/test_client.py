"""Every method of lfmserve.client against a real server on loopback, sync and async.

Expected values come from the same request made with plain httpx (the wire answer the client must read),
never from the client itself. Run against lfmserve by default; ``pytest -m slow tests/client`` also runs
them against llama-server built from the same llama.cpp (its differences are listed in docs/python.md).
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image
from pydantic import BaseModel, Field

from lfmserve.client import ContentDelta, FinalMessage, Stats, ToolCallDelta
from lfmserve.errors import (
    AuthenticationFailed,
    ContextLengthExceeded,
    InvalidRequest,
    NotFound,
    NotSupported,
    TransportError,
)
from lfmserve.testing import free_port, image_bytes, tiny_reranker, wav_bytes, write_lfm2_gguf
from tests.client.conftest import ALIAS, API_KEY, Target, launch, make_client
from tests.conftest import STATE_TIMEOUT_S, WEATHER, Running, wait_until

#: Why the tool-call tests do not run against llama-server: it answers free text, so there is no call to read.
NO_FORCED_CALLS = "llama-server does not constrain the tiny LFM2's answer to a call for a named or required tool_choice"
GREEDY = {"temperature": 0, "top_k": 1, "max_tokens": 8, "seed": 1}
HEADERS = {"Authorization": f"Bearer {API_KEY}"}


def raw(target: Target, path: str, **kwargs: Any) -> Any:
    """The server's JSON answer to a plain request."""
    response = httpx.post(target.url + path, headers=HEADERS, timeout=120, **kwargs)
    assert response.status_code == 200, response.text
    return response.json()


def raw_chat(target: Target, content: Any, **fields: Any) -> Any:
    return raw(target, "/v1/chat/completions", json={"messages": [{"role": "user", "content": content}], **fields})


def data_url(data: bytes, mime: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode()}"}}


def test_capabilities_from_models_and_props(client: Any, target: Target) -> None:
    caps = client.capabilities()
    props = httpx.get(target.url + "/props", headers=HEADERS).json()
    assert (caps.model, caps.ids) == (ALIAS, (ALIAS,))
    assert caps.n_ctx == 2048  # -c 4096 over -np 2: what one request can use
    assert (caps.vision, caps.audio, caps.tools, caps.embeddings, caps.reasoning) == (True, True, True, True, False)
    assert caps.sampling_defaults["temperature"] == props["default_generation_settings"]["params"]["temperature"]
    assert client.capabilities() is caps  # cached
    assert client.capabilities(refresh=True) == caps


def test_an_unknown_model_names_the_served_ones(client: Any) -> None:
    with pytest.raises(NotFound, match=r"model 'gpt-9' is not served here; the server has: tiny"):
        client.capabilities("gpt-9")


def test_chat_reads_the_answer_on_the_wire(client: Any, target: Target) -> None:
    result = client.chat("Hello there", **GREEDY)
    wire = raw_chat(target, "Hello there", **GREEDY)
    assert result.content == wire["choices"][0]["message"]["content"]
    assert (result.finish_reason, result.tool_calls, result.reasoning) == ("length", (), None)
    assert result.usage is not None and result.timings is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (wire["usage"]["prompt_tokens"], 8)
    assert result.timings.predicted_n == 8
    assert result.message() == {"role": "assistant", "content": result.content}


def test_stream_events_add_up_to_the_whole_answer(client: Any, target: Target) -> None:
    events = list(client.stream([{"role": "user", "content": "Hello there"}], **GREEDY))
    wire = raw_chat(target, "Hello there", **GREEDY)["choices"][0]["message"]["content"]
    assert "".join(event.text for event in events if isinstance(event, ContentDelta)) == wire
    final = events[-1]
    assert isinstance(final, FinalMessage)
    assert (final.result.content, final.result.finish_reason) == (wire, "length")
    stats = [event for event in events if isinstance(event, Stats) and event.usage is not None]
    assert [stat.usage.completion_tokens for stat in stats if stat.usage] == [8]


def test_a_stream_closed_early_frees_the_slot(client: Any, target: Target) -> None:
    events = client.stream("Tell me everything", temperature=0, max_tokens=2000)
    next(events)
    events.close()
    wait_until(
        lambda: not any(slot["is_processing"] for slot in httpx.get(target.url + "/slots", headers=HEADERS).json()),
        "the server stops the reply its client left",
    )


def test_forced_tool_call_comes_back_with_dict_arguments(client: Any, target: Target) -> None:
    if target.kind == "llama-server":
        pytest.skip(NO_FORCED_CALLS)
    choice = {"type": "function", "function": {"name": "get_weather"}}
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    options = {"temperature": 0, "top_k": 1, "max_tokens": 200}
    result = client.chat(ask, tools=[WEATHER], tool_choice=choice, **options)
    wire = raw(
        target, "/v1/chat/completions", json={"messages": ask, "tools": [WEATHER], "tool_choice": choice, **options}
    )
    call = wire["choices"][0]["message"]["tool_calls"][0]
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("get_weather", json.loads(call["function"]["arguments"]))
    ]
    assert result.tool_calls[0].id.startswith("call_")
    assert result.finish_reason == "tool_calls"
    streamed = list(client.stream(ask, tools=[WEATHER], tool_choice=choice, **options))
    deltas = [event for event in streamed if isinstance(event, ToolCallDelta)]
    assert json.loads("".join(delta.arguments for delta in deltas)) == result.tool_calls[0].arguments
    final = streamed[-1]
    assert isinstance(final, FinalMessage)
    assert [(c.name, c.arguments) for c in final.result.tool_calls] == [("get_weather", result.tool_calls[0].arguments)]


class City(BaseModel):
    name: str = Field(min_length=1, max_length=6)
    rank: int = Field(ge=1, le=9)


def test_a_pydantic_response_format_comes_back_parsed(client: Any, target: Target) -> None:
    result = client.chat("A city, as JSON", response_format=City, temperature=0, top_k=1, max_tokens=100)
    schema = {"type": "json_schema", "json_schema": {"name": "City", "schema": City.model_json_schema()}}
    wire = raw_chat(target, "A city, as JSON", response_format=schema, temperature=0, top_k=1, max_tokens=100)
    assert result.parsed == City.model_validate_json(wire["choices"][0]["message"]["content"])
    assert isinstance(result.parsed, City)


def test_webp_is_converted_and_jpeg_is_sent_as_it_is(client: Any, target: Target) -> None:
    webp = image_bytes(64, 48, seed=3, format="WEBP")
    buffer = io.BytesIO()
    Image.open(io.BytesIO(webp)).save(buffer, format="PNG")
    png = buffer.getvalue()
    options = {"temperature": 0, "top_k": 1, "max_tokens": 4}
    converted = client.chat("What is this?", images=[webp], **options)
    wire = raw_chat(target, [{"type": "text", "text": "What is this?"}, data_url(png, "image/png")], **options)
    assert converted.content == wire["choices"][0]["message"]["content"]
    assert converted.usage.prompt_tokens == wire["usage"]["prompt_tokens"]
    jpeg = image_bytes(64, 48, seed=3)
    as_is = client.chat("What is this?", images=[jpeg], **options)
    wire_jpeg = raw_chat(target, [{"type": "text", "text": "What is this?"}, data_url(jpeg, "image/jpeg")], **options)
    assert as_is.content == wire_jpeg["choices"][0]["message"]["content"]


def test_image_tokens_is_the_cost_of_one_image(client: Any, target: Target) -> None:
    from lfmserve.client.media import blank_jpeg

    text = {"type": "text", "text": "."}
    baseline = raw_chat(target, [text], max_tokens=1)["usage"]["prompt_tokens"]
    with_image = raw_chat(target, [text, data_url(blank_jpeg(96, 64), "image/jpeg")], max_tokens=1)
    assert client.image_tokens(96, 64) == with_image["usage"]["prompt_tokens"] - baseline
    assert client.image_tokens(96, 64) == with_image["usage"]["prompt_tokens"] - baseline


def test_embed_texts_and_images(client: Any, target: Target) -> None:
    jpeg = image_bytes(32, 32, seed=5)
    vectors = client.embed(texts=["a person at the door", "a parked car"], images=[jpeg])
    wire = raw(
        target,
        "/v1/embeddings",
        json={
            "input": [
                {"content": [{"type": "text", "text": "a person at the door"}]},
                {"content": [{"type": "text", "text": "a parked car"}]},
                {"content": [data_url(jpeg, "image/jpeg"), {"type": "text", "text": "\n"}]},
            ]
        },
    )
    expected = np.array([item["embedding"] for item in wire["data"]], dtype=np.float32)
    assert vectors.dtype == np.float32 and vectors.shape == expected.shape
    np.testing.assert_allclose(vectors, expected, rtol=1e-5, atol=1e-6)
    cut = client.embed(texts=["a parked car"], dimensions=8)
    first = expected[1, :8] / np.linalg.norm(expected[1, :8])
    np.testing.assert_allclose(cut, first[None, :], rtol=1e-4, atol=1e-5)
    with pytest.raises(InvalidRequest, match="dimensions"):
        client.embed(texts=["x"], dimensions=expected.shape[1] + 1)


def test_transcribe_and_its_chat_fallback(kind: str, client: Any, target: Target) -> None:
    audio = wav_bytes(1.0)
    options = {"model": ALIAS, "response_format": "json", "temperature": "0"}
    wire = raw(target, "/v1/audio/transcriptions", files={"file": ("a.wav", audio, "audio/wav")}, data=options)
    assert client.transcribe(audio, temperature=0) == wire["text"].strip()

    from lfmserve.client.operations import TRANSCRIBE_PROMPT

    sound = {"type": "input_audio", "input_audio": {"data": base64.b64encode(audio).decode(), "format": "wav"}}
    chat = raw_chat(target, [{"type": "text", "text": TRANSCRIBE_PROMPT}, sound], temperature=0)
    old = make_client(kind, target.url, api_key=API_KEY, model=ALIAS, transport=_without_transcriptions(kind))
    try:
        assert old.transcribe(audio, temperature=0) == (chat["choices"][0]["message"]["content"] or "").strip()
    finally:
        old.close()


def _without_transcriptions(kind: str) -> Any:
    """A real transport to the server, except that ``/v1/audio/transcriptions`` answers 404 (an older server)."""
    base: Any = httpx.HTTPTransport() if kind == "sync" else httpx.AsyncHTTPTransport()

    def missing(request: httpx.Request) -> httpx.Response | None:
        if request.url.path == "/v1/audio/transcriptions":
            return httpx.Response(
                404, json={"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
            )
        return None

    if kind == "sync":

        class Sync(httpx.BaseTransport):
            def handle_request(self, request: httpx.Request) -> httpx.Response:
                return missing(request) or base.handle_request(request)

            def close(self) -> None:
                base.close()

        return Sync()

    class Async(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            return missing(request) or await base.handle_async_request(request)

        async def aclose(self) -> None:
            await base.aclose()

    return Async()


def test_tokenize_and_detokenize(client: Any, target: Target) -> None:
    wire = raw(target, "/tokenize", json={"content": "Hello world", "add_special": False, "parse_special": True})
    assert client.tokenize("Hello world") == wire["tokens"]
    assert client.detokenize(wire["tokens"]) == raw(target, "/detokenize", json={"tokens": wire["tokens"]})["content"]


def test_health_and_wait_until_ready(client: Any) -> None:
    assert client.health() is True
    client.wait_until_ready(timeout=STATE_TIMEOUT_S)


def test_a_bad_field_is_an_invalid_request_naming_it(client: Any, target: Target) -> None:
    with pytest.raises(InvalidRequest) as caught:
        client.chat("hi", max_tokens=4, top_k="many")
    assert type(caught.value) is InvalidRequest
    if target.kind == "lfmserve":  # llama-server names no param
        assert caught.value.param == "top_k"


def test_a_prompt_over_the_context_is_context_length_exceeded(client: Any) -> None:
    with pytest.raises(ContextLengthExceeded) as caught:
        client.chat("word " * 3000, max_tokens=4)
    assert caught.value.n_ctx == 2048
    assert caught.value.n_prompt_tokens > 2048


def test_a_wrong_key_is_authentication_failed(kind: str, target: Target) -> None:
    stranger = make_client(kind, target.url, api_key="wrong", model=ALIAS)
    try:
        with pytest.raises(AuthenticationFailed, match="Invalid API Key"):
            stranger.chat("hi", max_tokens=1)
    finally:
        stranger.close()


def test_rerank_without_rerank_is_not_supported(client: Any) -> None:
    with pytest.raises(NotSupported, match="does not support reranking"):
        client.rerank("q", ["a", "b"])


def test_nothing_listening_is_a_transport_error(kind: str) -> None:
    nowhere = make_client(kind, f"http://127.0.0.1:{free_port()}", retries=0)
    try:
        with pytest.raises(TransportError, match="cannot connect"):
            nowhere.chat("hi")
    finally:
        nowhere.close()


@pytest.fixture(scope="module")
def rerank_url(target: Target, processes: list[Running], models_dir: Path) -> str:
    """A reranker of the same program as ``target``."""
    model = write_lfm2_gguf(models_dir / "tiny-reranker.gguf", tiny_reranker())
    return launch(target.kind, ["-m", str(model), "--rerank", "-c", "1024", "-t", "1"], processes).url


def test_rerank_orders_the_documents_by_the_servers_scores(kind: str, rerank_url: str) -> None:
    documents = ["a cat on a mat", "stock prices fell", "the cat sleeps", "rain tomorrow"]
    wire = httpx.post(rerank_url + "/v1/rerank", json={"query": "cats", "documents": documents}).json()
    expected = sorted(((r["relevance_score"], r["index"]) for r in wire["results"]), reverse=True)
    reranker = make_client(kind, rerank_url)
    try:
        results = reranker.rerank("cats", documents)
        # llama-server's scores move in the 7th digit from one batch to the next
        assert [(r.index, r.document) for r in results] == [(i, documents[i]) for _, i in expected]
        assert [r.score for r in results] == pytest.approx([score for score, _ in expected], rel=1e-6)
        assert [r.index for r in reranker.rerank("cats", documents, top_n=2)] == [i for _, i in expected[:2]]
    finally:
        reranker.close()


def test_a_route_the_server_lacks_is_not_found(kind: str, target: Target) -> None:
    elsewhere = make_client(kind, target.url + "/no/such/prefix", api_key=API_KEY, model=ALIAS)
    try:
        with pytest.raises(NotFound):
            elsewhere.tokenize("hi")
    finally:
        elsewhere.close()
