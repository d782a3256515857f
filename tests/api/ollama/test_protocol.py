"""Ollama's bodies read into the chat layer's requests: ``keep_alive`` in every form clients send, ``[img]``
placement, options and their float-written integers, ``think`` and ``format``, model names; and the answer lines
a parsed output becomes (tool calls whole, arguments as objects)."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lfmserve.api.body import parse_body
from lfmserve.api.ollama import cards
from lfmserve.api.ollama.protocol import (
    ChatBody,
    EmbedBody,
    EmbeddingsBody,
    GenerateBody,
    Options,
    content_with_images,
)
from lfmserve.api.ollama.responses import Reply, chat_lines, generate_lines
from lfmserve.chat.media import media_type_of_base64
from lfmserve.chat.output import AssistantOutputParser
from lfmserve.chat.request import ContentPart, Message
from lfmserve.engine.records import EngineOutput, Timings
from lfmserve.errors import InvalidRequest
from lfmserve.testing import image_bytes, wav_bytes

PNG = base64.b64encode(image_bytes(8, 8, seed=1, format="PNG")).decode()
JPEG = base64.b64encode(image_bytes(8, 8, seed=2)).decode()
WEBP = base64.b64encode(image_bytes(8, 8, seed=3, format="WEBP")).decode()
WAV = base64.b64encode(wav_bytes(0.1)).decode()


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        (-1, -1.0),
        (-1.0, -1.0),  # the ollama client writes Home Assistant's -1 as a float
        ("-1s", -1.0),  # older Home Assistant
        ("-1", -1.0),
        (0, 0.0),
        ("0s", 0.0),
        ("0", 0.0),
        (300, 300.0),
        ("300s", 300.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("250ms", 0.25),
        ("10", 10.0),
        ("-0s", 0.0),
        (-1e300, -1.0),  # any negative number is "for ever", as Ollama reads it
        (-(10**400), -1.0),
        (9223372036, 9223372036.0),  # Go's longest duration, a little under 2^63 ns
        ("2562047h", 2562047 * 3600.0),
    ],
)
def test_keep_alive_is_read_in_every_form_clients_send(value: Any, seconds: float | None) -> None:
    for body in (ChatBody, GenerateBody, EmbedBody, EmbeddingsBody):
        assert parse_body(body, json.dumps({"keep_alive": value}).encode()).keep_alive == seconds


@pytest.mark.parametrize(
    "value",
    [
        "5 minutes",
        "m",
        "",
        "5x",
        "--5m",
        True,
        "inf",
        "-inf",
        "nan",
        "infinity",
        "1e12",  # Go reads no exponent in a duration
        1e12,  # seconds past Go's durations
        "2562048h",
        10**30,
        float("inf"),  # the JSON text Infinity, which Python's json writes and pydantic reads
        float("nan"),
        [1],
        {"seconds": 5},
    ],
)
def test_a_keep_alive_that_is_no_finite_duration_is_a_400_naming_it(value: Any) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_body(ChatBody, json.dumps({"model": "m", "keep_alive": value}).encode())
    assert (caught.value.param, caught.value.message) == (
        "keep_alive",
        f"Invalid value for 'keep_alive': expected seconds or a duration such as '5m', up to 292 years (got {value!r})",
    )


def test_the_module_imports_without_llama_cpp_or_the_http_stack() -> None:
    """The router parses Ollama's bodies with these models: importing them must not load llama.cpp (the media
    sniffing that does is imported when an image is adapted), nor FastAPI."""
    code = "import sys, lfmserve.api.ollama.protocol; print(sorted({'llama_cpp', 'fastapi'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout == "[]\n"


def test_images_go_where_their_markers_are_and_the_rest_before_the_text() -> None:
    assert content_with_images("plain", []) == "plain"
    assert content_with_images("a [img] b [img] c", [PNG, JPEG]) == (
        ContentPart("text", "a "),
        ContentPart("image", source=PNG),
        ContentPart("text", " b "),
        ContentPart("image", source=JPEG),
        ContentPart("text", " c"),
    )
    # Three images, two markers: the first two take the markers, the third leads; a marker left over stays text.
    assert content_with_images("see [img] then [img]", [PNG, JPEG, WEBP]) == (
        ContentPart("image", source=WEBP),
        ContentPart("text", "see "),
        ContentPart("image", source=PNG),
        ContentPart("text", " then "),
        ContentPart("image", source=JPEG),
    )
    assert content_with_images("a [img] b [img]", [PNG]) == (
        ContentPart("text", "a "),
        ContentPart("image", source=PNG),
        ContentPart("text", " b [img]"),
    )
    assert content_with_images("", [WAV]) == (ContentPart("audio", source=WAV),)


def test_the_bytes_decide_image_or_audio() -> None:
    assert [media_type_of_base64(data) for data in (PNG, JPEG, WEBP, WAV, "not base64!")] == [
        "image",
        "image",
        "image",
        "audio",
        "image",
    ]


def test_a_chat_body_becomes_the_chat_request_an_openai_body_would() -> None:
    body = parse_body(
        ChatBody,
        json.dumps(
            {
                "model": "lfm2:latest",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "What is in [img]?", "images": [PNG]},
                    {"role": "assistant", "tool_calls": [{"function": {"name": "look", "arguments": {"at": "sky"}}}]},
                    {"role": "tool", "tool_name": "look", "content": "blue"},
                    {"role": "assistant", "content": "Blue.", "thinking": "It said blue.", "tool_calls": []},
                ],
                "tools": [{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}],
                "options": {"num_ctx": 8192.0, "num_predict": -2, "temperature": 0, "top_k": 5.0, "stop": ["x"]},
                "keep_alive": -1.0,
                "think": "high",
                "format": "json",
            }
        ).encode(),
    )
    chat = body.to_chat_request()
    assert chat.messages == (
        Message(role="system", content="Be brief."),
        Message(
            role="user",
            content=(ContentPart("text", "What is in "), ContentPart("image", source=PNG), ContentPart("text", "?")),
        ),
        Message(
            role="assistant",
            content="",
            tool_calls=({"type": "function", "function": {"name": "look", "arguments": '{"at":"sky"}'}},),
        ),
        Message(role="tool", content="blue", name="look"),
        Message(role="assistant", content="Blue.", reasoning_content="It said blue."),
    )
    assert chat.tools == ({"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}},)
    assert chat.template_kwargs == {"enable_thinking": True, "reasoning_effort": "high"}
    assert chat.response_schema == {"type": "object"}
    assert chat.reasoning_format == "auto"
    generation = chat.generation
    assert generation.sampling == {"temperature": 0.0, "top_k": 5}
    assert (generation.max_tokens, generation.stop, generation.n_probs) == (-1, ("x",), None)


@pytest.mark.parametrize(
    ("think", "kwargs"),
    [(None, {}), (False, {"enable_thinking": False}), (True, {"enable_thinking": True})],
)
def test_think_sets_the_templates_switch(think: bool | None, kwargs: dict[str, Any]) -> None:
    body = ChatBody(model="m", messages=[], think=think)
    assert body.thinking() == kwargs
    assert body.wants_thinking is bool(think)


def test_an_unknown_think_level_and_a_mistyped_option_are_400s() -> None:
    with pytest.raises(InvalidRequest, match="invalid think value: 'hard'"):
        ChatBody(model="m", think="hard").thinking()
    with pytest.raises(InvalidRequest, match=r"Invalid value for 'options.temperature'"):
        parse_body(ChatBody, b'{"model": "m", "options": {"temperature": "hot"}}')
    with pytest.raises(InvalidRequest, match=r"Invalid value for 'options.num_ctx'"):
        parse_body(ChatBody, b'{"model": "m", "options": {"num_ctx": 8192.5}}')


def test_null_options_are_unset_and_a_schema_format_is_the_answers_schema() -> None:
    options = parse_body(Options, b'{"num_ctx": 4096, "num_predict": null, "stop": [], "top_p": null}')
    assert options.sampling() == {} and options.max_tokens() is None
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    generate = GenerateBody(model="m", prompt="p", system="s", format=schema)
    chat = generate.to_chat_request()
    assert chat.messages == (Message(role="system", content="s"), Message(role="user", content="p"))
    assert chat.response_schema == schema
    assert generate.raw_options().json_schema == schema
    with pytest.raises(InvalidRequest, match="a template in the request is not supported"):
        GenerateBody(model="m", prompt="p", template="{{ .Prompt }}").to_chat_request()


def test_names_take_latest_on_and_off_and_tags_inside_paths_do_not_count() -> None:
    assert cards.ollama_name("lfm2") == "lfm2:latest"
    assert cards.ollama_name("LiquidAI/LFM2-GGUF:Q4_K_M") == "LiquidAI/LFM2-GGUF:Q4_K_M"
    assert cards.ollama_name("host:8080/models/x") == "host:8080/models/x:latest"
    assert cards.matches("lfm2:latest", ["lfm2"]) and cards.matches("lfm2", ["lfm2:latest"])
    assert cards.matches("chat", ["lfm2", "chat"]) and not cards.matches("lfm2:q8", ["lfm2"])


def test_ps_shows_a_time_to_live_past_the_horizon_as_for_ever() -> None:
    """``--models-ttl`` takes any whole number of seconds; ``/api/ps`` must still write a date for it."""
    card = cards.ModelCard(
        name="m:latest",
        size=1,
        modified=0.0,
        architecture="lfm2",
        basename=None,
        parameter_count=1,
        size_label=None,
        file_type=-1,
        context_length=1,
        embedding_length=1,
        template="",
        capabilities=("completion",),
    )
    expiries = [cards.ps_entry(card, now=0.0, keep_s=keep_s)["expires_at"] for keep_s in (-1, 10**12, 10**30, 60)]
    assert expiries == [expiries[0], expiries[0], expiries[0], "1970-01-01T00:01:00.000000Z"]
    assert expiries[0] == "2169-11-13T00:00:00.000000Z"  # 200 years of 365 days


def _output(text: str, *, finish: str | None = None) -> EngineOutput:
    timings = Timings(prompt_n=7, prompt_ms=2.5, predicted_n=3, predicted_ms=4.0)
    return EngineOutput(
        text=text,
        token_ids=(1,),
        id_slot=0,
        n_prompt_tokens=9,
        n_cached_tokens=2,
        n_decoded=3,
        timings=timings,
        finish_reason=finish,  # type: ignore[arg-type]
    )


async def _collect(lines: AsyncIterator[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line async for line in lines]


def _lines(pieces: list[str], shape: Any, finish: str = "stop") -> list[dict[str, Any]]:
    async def outputs() -> AsyncIterator[EngineOutput]:
        for index, piece in enumerate(pieces):
            yield _output(piece, finish=finish if index == len(pieces) - 1 else None)

    parser = AssistantOutputParser(split_reasoning=True, parse_tool_calls=True)
    lines = asyncio.run(_collect(shape(Reply("m:latest"), parser, outputs())))
    for line in lines:
        assert line.pop("model") == "m:latest" and isinstance(line.pop("created_at"), str)
    return lines


def test_a_stream_has_a_line_per_piece_each_call_whole_and_the_counters_last() -> None:
    pieces = ["<think>plan", "</think>Sure. ", '<|tool_call_start|>[look(at="sky"), ', "wait(s=2)]<|tool_call_end|>"]
    lines = _lines(pieces, chat_lines)
    last = lines.pop()
    assert last.pop("total_duration") > 0
    assert last == {
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "done_reason": "stop",
        "load_duration": 0,
        "prompt_eval_count": 9,
        "prompt_eval_duration": 2_500_000,
        "eval_count": 3,
        "eval_duration": 4_000_000,
    }
    calls = [line["message"].pop("tool_calls") for line in lines[-2:]]
    assert [call[0]["function"] for call in calls] == [
        {"index": 0, "name": "look", "arguments": {"at": "sky"}},
        {"index": 1, "name": "wait", "arguments": {"s": 2}},
    ]
    assert all(call[0]["id"].startswith("call_") for call in calls)
    assert lines == [
        {"message": {"role": "assistant", "content": "", "thinking": "plan"}, "done": False},
        {"message": {"role": "assistant", "content": "Sure. "}, "done": False},
        {"message": {"role": "assistant", "content": ""}, "done": False},
        {"message": {"role": "assistant", "content": ""}, "done": False},
    ]


def test_a_generate_stream_cut_at_the_limit_says_length() -> None:
    lines = _lines(["<think>a</think>", "b"], generate_lines, finish="length")
    assert [{k: line[k] for k in line if k in ("response", "thinking", "done", "done_reason")} for line in lines] == [
        {"response": "", "thinking": "a", "done": False},
        {"response": "b", "done": False},
        {"response": "", "done": True, "done_reason": "length"},
    ]
