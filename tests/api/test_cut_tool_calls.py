"""A call list the token limit cuts, as LFM models write it under ``tool_choice: "required"`` (call after call until
``max_tokens``), answered in every API family: the calls written before the cut are tool calls, whole and
streamed, and neither the cut tail nor the call markers ever reach the text."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai

from tests.conftest import ServerThread

CAMERA = {
    "type": "function",
    "function": {
        "name": "get_camera_status",
        "description": "Camera status",
        "parameters": {
            "type": "object",
            "properties": {"camera": {"type": "string", "enum": ["front_door", "back_yard"]}},
            "required": ["camera"],
        },
    },
}
ASK = [{"role": "user", "content": "status?"}]
#: What the tiny model writes greedily here: two whole calls, then the limit cuts a third.
CALLS = [("get_camera_status", {"camera": "back_yard"})] * 2
MARKERS = ("<|tool_call_start|>", "<|tool_call_end|>", "get_camera_status(")


def test_openai_whole_and_streamed(tools_server: ServerThread, client: openai.OpenAI) -> None:
    fields: dict[str, Any] = {"tools": [CAMERA], "tool_choice": "required", "max_tokens": 90, "temperature": 0}
    whole = client.chat.completions.create(model="m", messages=ASK, **fields)  # type: ignore[call-overload]
    choice = whole.choices[0]
    assert choice.finish_reason == "length" and not choice.message.content
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or []]
    assert calls == CALLS
    streamed: dict[int, dict[str, str]] = {}
    texts, finishes = [], []
    for chunk in client.chat.completions.create(model="m", messages=ASK, stream=True, **fields):  # type: ignore[call-overload]
        delta = chunk.choices[0].delta
        texts.append(delta.content or "")
        finishes.append(chunk.choices[0].finish_reason)
        for call in delta.tool_calls or []:
            entry = streamed.setdefault(call.index, {"name": "", "arguments": ""})
            entry["name"] += (call.function and call.function.name) or ""
            entry["arguments"] += (call.function and call.function.arguments) or ""
    assert [(v["name"], json.loads(v["arguments"])) for _, v in sorted(streamed.items())] == CALLS
    assert "".join(texts) == "" and finishes[-1] == "length"


def test_anthropic_messages(tools_server: ServerThread) -> None:
    tool = {
        "name": "get_camera_status",
        "description": "Camera status",
        "input_schema": CAMERA["function"]["parameters"],
    }  # type: ignore[index]
    request: dict[str, Any] = {
        "model": "m",
        "max_tokens": 90,
        "messages": ASK,
        "tools": [tool],
        "tool_choice": {"type": "any"},
        "extra_body": {"temperature": 0},
    }
    with anthropic.Anthropic(base_url=tools_server.url, api_key="none") as client:
        message = client.messages.create(**request)
        assert message.stop_reason == "max_tokens"
        assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == CALLS
        assert [b for b in message.content if b.type == "text"] == []
        with client.messages.stream(**request) as stream:
            events = list(stream)
            final = stream.get_final_message()
        assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == CALLS
        assert not any(getattr(e, "type", "") == "text" for e in events)


def test_responses_api(tools_server: ServerThread) -> None:
    tool = {"type": "function", **CAMERA["function"]}  # type: ignore[dict-item]
    body = {"input": "status?", "tools": [tool], "tool_choice": "required", "max_output_tokens": 90, "temperature": 0}
    answer = httpx.post(tools_server.url + "/v1/responses", json=body, timeout=60).json()
    calls = [
        (item["name"], json.loads(item["arguments"])) for item in answer["output"] if item["type"] == "function_call"
    ]
    assert calls == CALLS
    texts = [item for item in answer["output"] if item["type"] == "message"]
    assert all(not any(m in json.dumps(t) for m in MARKERS) for t in texts)
    streamed = httpx.post(tools_server.url + "/v1/responses", json={**body, "stream": True}, timeout=60).text
    assert not any(marker in streamed for marker in MARKERS[:2])
    assert streamed.count("event: response.function_call_arguments.delta\n") == 2
