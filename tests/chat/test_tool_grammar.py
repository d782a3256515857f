"""Tool calling end to end: the official openai client against the tiny LFM2 model.

The random model never writes a call on its own; the grammar-constrained sampler is what makes it, so
these tests check the grammar as much as the parsing: every call names a declared tool and its
arguments validate against that tool's schema, for many seeds, streamed and not.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai

from tests.conftest import ASK, TOOLS

CHOICE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "pick_city",
        "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"]},
    },
}


SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in [*TOOLS, CHOICE_TOOL]}


def _valid_calls(calls: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, SCHEMAS[call.function.name])
        out.append((call.function.name, arguments))
    return out


def _stream_calls(client: openai.OpenAI, **request: Any) -> tuple[list[tuple[str, dict[str, Any]]], str, str]:
    """Accumulate a streamed answer the way OpenAI documents it: headers by index, then argument fragments."""
    calls: dict[int, dict[str, str]] = {}
    content, finish = "", ""
    for chunk in client.chat.completions.create(model="tiny", stream=True, **request):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        finish = choice.finish_reason or finish
        for part in choice.delta.tool_calls or []:
            if part.id is not None:
                assert part.index not in calls and part.function is not None and part.type == "function"
                calls[part.index] = {"id": part.id, "name": part.function.name or "", "arguments": ""}
            assert part.function is not None
            calls[part.index]["arguments"] += part.function.arguments or ""
    assert sorted(calls) == list(range(len(calls)))
    parsed = [(calls[i]["name"], json.loads(calls[i]["arguments"])) for i in sorted(calls)]
    for name, arguments in parsed:
        jsonschema.validate(arguments, SCHEMAS[name])
    return parsed, content, finish


def test_required_tool_choice_always_returns_schema_valid_calls(client: openai.OpenAI) -> None:
    names = set()
    for seed in range(8):
        request: dict[str, Any] = {
            "messages": ASK,
            "tools": TOOLS,
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "max_tokens": 300,
            "temperature": 1.0,
            "seed": seed,
        }
        response = client.chat.completions.create(model="tiny", **request)
        choice = response.choices[0]
        assert choice.finish_reason == "tool_calls", choice.message.content
        assert choice.message.content == ""  # nothing before the call, and never the markup
        calls = _valid_calls(choice.message.tool_calls or [])
        assert calls
        names |= {name for name, _ in calls}
        streamed, content, finish = _stream_calls(client, **request)
        assert (streamed, content, finish) == (calls, "", "tool_calls")  # same seed, same calls
    assert names == {"get_weather", "web.search"}  # both tools are reachable


def test_a_named_function_is_the_only_call(client: openai.OpenAI) -> None:
    for seed in range(4):
        request: dict[str, Any] = {
            "messages": ASK,
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "web.search"}},
            "max_tokens": 300,
            "temperature": 1.0,
            "seed": seed,
        }
        response = client.chat.completions.create(model="tiny", **request)
        calls = _valid_calls(response.choices[0].message.tool_calls or [])
        assert [name for name, _ in calls] == ["web.search"]
        streamed, _, finish = _stream_calls(client, **request)
        assert (streamed, finish) == (calls, "tool_calls")


def test_auto_tool_choice_constrains_a_call_once_the_model_opens_one(client: openai.OpenAI) -> None:
    # A bias on <|tool_call_start|> (id 10) makes the random model open a call after some text.
    request: dict[str, Any] = {
        "messages": ASK,
        "tools": [CHOICE_TOOL],
        "max_tokens": 200,
        "temperature": 0,
        "parallel_tool_calls": False,
        "logit_bias": {"10": 6},
    }
    response = client.chat.completions.create(model="tiny", **request)
    choice = response.choices[0]
    calls = _valid_calls(choice.message.tool_calls or [])
    assert len(calls) == 1 and choice.finish_reason == "tool_calls"
    assert choice.message.content and "<|tool_call" not in choice.message.content
    streamed, content, finish = _stream_calls(client, **request)
    assert (streamed, content, finish) == (calls, choice.message.content, "tool_calls")
    # Favoured more, the model keeps calling: six whole calls (indexes 0-5), then one cut off by the limit.
    request["logit_bias"] = {"10": 7}
    choice = client.chat.completions.create(model="tiny", **request).choices[0]
    calls = _valid_calls(choice.message.tool_calls or [])
    assert len(calls) == 6 and choice.finish_reason == "length"
    assert choice.message.content and "<|tool_call" not in choice.message.content  # the cut call is dropped
    assert _stream_calls(client, **request) == (calls, choice.message.content, "length")


def test_a_call_cut_off_by_max_tokens_is_dropped_and_no_marker_is_text(client: openai.OpenAI) -> None:
    # Greedy: the streamed reply must be the same one (sampled, the two could pick different tools).
    request: dict[str, Any] = {
        "messages": ASK,
        "tools": TOOLS,
        "tool_choice": "required",
        "max_tokens": 5,
        "temperature": 0,
    }
    choice = client.chat.completions.create(model="tiny", **request).choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls
    assert choice.message.content == ""  # five tokens: no call was whole before the cut
    streamed, content, finish = _stream_calls(client, **request)
    assert (streamed, content, finish) == ([], choice.message.content, "length")


def test_parameter_names_python_cannot_spell_get_json_calls(client: openai.OpenAI) -> None:
    mail = {
        "type": "function",
        "function": {
            "name": "send-mail",
            "parameters": {
                "type": "object",
                "properties": {"from": {"enum": ["me"]}, "subject-line": {"type": "string", "maxLength": 5}},
                "required": ["from", "subject-line"],
            },
        },
    }
    request: dict[str, Any] = {"messages": ASK, "tools": [mail], "tool_choice": "required", "max_tokens": 80}
    request["parallel_tool_calls"] = False
    choice = client.chat.completions.create(model="tiny", **request).choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice.message.content
    call = choice.message.tool_calls[0]
    arguments = json.loads(call.function.arguments)
    assert call.function.name == "send-mail" and arguments["from"] == "me" and len(arguments["subject-line"]) <= 5
