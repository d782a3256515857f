"""What the client reads from answers no test server writes: other error shapes, llama-swap's listing and its
``/upstream/{model}`` routes, and the media conversions (httpx's MockTransport plays the server)."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import httpx
import pytest
from PIL import Image

from lfmserve.client import Client
from lfmserve.client.media import audio_part, image_url
from lfmserve.client.server_errors import error_from_body
from lfmserve.errors import (
    AuthenticationFailed,
    ContextLengthExceeded,
    EngineError,
    InvalidRequest,
    LfmError,
    NotFound,
    PayloadTooLarge,
    Unavailable,
)
from lfmserve.results import ToolCall
from lfmserve.testing import image_bytes, wav_bytes


def test_llama_server_error_bodies_become_lfmserves_classes() -> None:
    body = {"error": {"code": 400, "message": "bad top_k", "type": "invalid_request_error", "param": "top_k"}}
    error = error_from_body(400, body)
    assert (type(error), error.message, error.param) == (InvalidRequest, "bad top_k", "top_k")
    context = {
        "error": {
            "code": 400,
            "message": "too long",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 9,
            "n_ctx": 4,
        }
    }
    exceeded = error_from_body(400, context)
    assert isinstance(exceeded, ContextLengthExceeded)
    assert (exceeded.n_prompt_tokens, exceeded.n_ctx, str(exceeded)) == (9, 4, "too long")
    assert type(error_from_body(413, {"error": {"message": "big", "type": "invalid_request_error"}})) is PayloadTooLarge
    assert type(error_from_body(500, {"error": {"message": "decode", "type": "server_error"}})) is EngineError


def test_anthropic_and_plain_text_errors() -> None:
    anthropic = error_from_body(401, {"type": "error", "error": {"type": "authentication_error", "message": "no key"}})
    assert (type(anthropic), anthropic.message) == (AuthenticationFailed, "no key")
    proxy = error_from_body(503, "upstream is starting\n")
    assert (type(proxy), proxy.message) == (Unavailable, "HTTP 503: upstream is starting")
    teapot = error_from_body(418, "")
    assert (type(teapot), teapot.message) == (LfmError, "HTTP 418: no message")


def test_images_pass_through_when_readable_and_convert_when_not() -> None:
    jpeg = image_bytes(8, 8, seed=1)
    assert image_url(jpeg) == "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    webp = image_bytes(8, 8, seed=1, format="WEBP")
    converted = image_url(webp)
    assert converted.startswith("data:image/png;base64,")
    png = Image.open(io.BytesIO(base64.b64decode(converted.split(",", 1)[1])))
    assert (png.format, png.size, png.tobytes()) == (
        "PNG",
        (8, 8),
        Image.open(io.BytesIO(webp)).convert("RGB").tobytes(),
    )
    pil = Image.new("P", (3, 2))
    assert Image.open(io.BytesIO(base64.b64decode(image_url(pil).split(",", 1)[1]))).mode == "RGB"
    with pytest.raises(InvalidRequest, match="not a picture"):
        image_url(b"not an image at all")


def test_audio_is_sent_as_is_and_unknown_bytes_refused(tmp_path: Any) -> None:
    wav = wav_bytes(0.1)
    path = tmp_path / "a.wav"
    path.write_bytes(wav)
    assert audio_part(path) == {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(wav).decode(), "format": "wav"},
    }
    with pytest.raises(InvalidRequest, match="WAV, MP3 or FLAC"):
        audio_part(b"OggS....")
    with pytest.raises(InvalidRequest, match="cannot read the audio file"):
        audio_part(tmp_path / "missing.wav")


def fake_llama_swap(seen: list[str]) -> httpx.MockTransport:
    """llama-swap's answers: a listing with ``status.args`` and ``meta``, native routes only under /upstream."""

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        seen.append(path)
        for name in ("lfm-vl", "vision"):  # llama-swap takes the model's aliases in the path too
            path = path.replace(f"/upstream/{name}/", "/upstream/lfm-vl/")
        if path == "/v1/models":
            entry = {
                "id": "lfm-vl",
                "aliases": ["vision"],
                "meta": {"n_ctx": 0},
                "status": {"args": ["llama-server", "--jinja", "--ctx-size", "8192", "--mmproj", "p.gguf"]},
                "architecture": {"input_modalities": ["text", "image"]},
            }
            return httpx.Response(200, json={"object": "list", "data": [entry]})
        if path == "/upstream/lfm-vl/props":
            template = "{% if enable_thinking %}<think>{% endif %}"
            return httpx.Response(200, json={"chat_template": template, "default_generation_settings": {"n_ctx": 4096}})
        if path == "/upstream/lfm-vl/tokenize":
            return httpx.Response(200, json={"tokens": [5, 6]})
        if path == "/v1/embeddings":
            return httpx.Response(501, json={"error": {"code": 501, "message": "no", "type": "not_supported_error"}})
        return httpx.Response(404, text="not found")

    return httpx.MockTransport(answer)


def test_llama_swap_capabilities_and_upstream_routes() -> None:
    seen: list[str] = []
    with Client("http://swap.local/v1/", model="vision", transport=fake_llama_swap(seen)) as client:
        caps = client.capabilities()
        assert (caps.model, caps.ids, caps.n_ctx) == ("lfm-vl", ("lfm-vl", "vision"), 8192)  # meta 0: from the argv
        assert (caps.vision, caps.audio, caps.tools, caps.reasoning, caps.embeddings) == (
            True,
            False,
            True,
            True,
            False,
        )
        assert client.tokenize("hi") == [5, 6]
        assert client.tokenize("hi") == [5, 6]
    assert seen == [
        "/v1/models",
        "/props",
        "/upstream/vision/props",
        "/v1/embeddings",
        "/upstream/vision/tokenize",
        "/upstream/vision/tokenize",
    ]


def test_a_route_missing_everywhere_is_not_found() -> None:
    with Client("http://swap.local", model="other", transport=fake_llama_swap([])) as client:
        with pytest.raises(NotFound, match="HTTP 404: not found"):
            client.detokenize([1])


def test_a_tool_call_whose_arguments_are_not_json_is_an_error() -> None:
    answer = {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{oops"}}]},
            }
        ]
    }
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=answer))
    with Client("http://x", transport=transport) as client:
        with pytest.raises(LfmError, match=r"tool call 'f': the arguments are not JSON: '\{oops'"):
            client.chat("hi")


def test_a_call_cut_off_at_max_tokens_is_left_out_of_the_reply_whole_or_streamed() -> None:
    # What llama-server streamed in CI for tool_choice required and max_tokens 6: the call ends mid-string.
    first, cut = (
        {"name": "f", "arguments": '{"a":1}'},
        {"name": "get_weather", "arguments": '{"days":57.7E+1,"city":" A'},
    )
    whole = {
        "choices": [
            {
                "finish_reason": "length",
                "message": {"tool_calls": [{"id": "c", "function": first}, {"id": "d", "function": cut}]},
            }
        ]
    }
    pieces = [{"index": 0, "id": "c", "function": first}, {"index": 1, "id": "d", "function": cut}]
    lines = [
        "data: " + json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": pieces}}]}),
        "data: " + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
        "data: [DONE]",
    ]
    streamed = "\n\n".join(lines) + "\n\n"

    def answer(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("stream"):
            return httpx.Response(200, text=streamed, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=whole)

    with Client("http://x", transport=httpx.MockTransport(answer)) as client:
        result = client.chat("hi")
        final = list(client.stream("hi"))[-1].result  # type: ignore[union-attr]
    for reply in (result, final):
        assert (reply.finish_reason, reply.tool_calls) == ("length", (ToolCall("c", "f", {"a": 1}),))


def test_an_error_inside_a_stream_is_raised() -> None:
    lines = [
        'data: {"choices":[{"index":0,"delta":{"content":"He"}}]}',
        'data: {"error":{"code":500,"message":"decode failed","type":"server_error"}}',
    ]
    stream = "\n\n".join(lines) + "\n\n"
    transport = httpx.MockTransport(
        lambda request: httpx.Response(200, text=stream, headers={"content-type": "text/event-stream"})
    )
    with Client("http://x", transport=transport) as client:
        events = client.stream("hi")
        assert next(events).text == "He"  # type: ignore[union-attr]
        with pytest.raises(EngineError, match="decode failed"):
            next(events)
    assert json.loads(lines[0][6:])["choices"][0]["delta"]["content"] == "He"
