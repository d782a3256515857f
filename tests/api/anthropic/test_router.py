"""Anthropic's routes over real loopback HTTP with the official ``anthropic`` client: messages whole and streamed,
tools, the prompt the body renders to (compared with the OpenAI body llama-server converts it to), token counts,
errors and the API key."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import jsonschema
import pytest

from lfmserve.settings import Settings
from tests.conftest import ServerThread, post

SYSTEM = "You are a helpful assistant."
ASK: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
    },
}
OPENAI_WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "description": WEATHER["description"], "parameters": WEATHER["input_schema"]},
}
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}}
#: This client takes no sampling arguments (newer models refuse them): llama-server's are extra body fields.
GREEDY = {"temperature": 0}
NO_MMPROJ = "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"


@pytest.fixture(scope="module")
def client(tools_server: ServerThread) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=tools_server.url, api_key="not-needed", max_retries=0) as opened:
        yield opened


def _input_tokens(server: ServerThread, openai_body: dict[str, Any]) -> int:
    """The prompt size of an OpenAI chat body (what llama-server converts the Anthropic body into)."""
    response = post(server, "/v1/chat/completions/input_tokens", openai_body)
    assert response.status_code == 200, response.text
    return int(response.json()["input_tokens"])


def _count(client: anthropic.Anthropic, **body: Any) -> int:
    return client.messages.count_tokens(model="tiny", **body).input_tokens


def test_greedy_message_and_its_stream_agree(client: anthropic.Anthropic) -> None:
    request: dict[str, Any] = {
        "model": "tiny",
        "max_tokens": 16,
        "extra_body": GREEDY,
        "system": SYSTEM,
        "messages": ASK,
    }
    message = client.messages.create(**request)
    assert message.type == "message" and message.role == "assistant" and message.model == "tiny-lfm2.gguf"
    assert message.id.startswith("chatcmpl-")
    assert [block.type for block in message.content] == ["text"]
    assert (message.stop_reason, message.stop_sequence, message.usage.output_tokens) == ("max_tokens", None, 16)
    text = message.content[0].text
    with client.messages.stream(**request) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text and final.content[0].text == text  # type: ignore[union-attr]
    assert (final.stop_reason, final.usage.output_tokens) == ("max_tokens", 16)
    usage = message.usage
    assert usage.input_tokens + (usage.cache_read_input_tokens or 0) == _count(client, system=SYSTEM, messages=ASK)


def test_the_raw_stream_names_every_event_in_llama_servers_order(tools_server: ServerThread) -> None:
    body = {"max_tokens": 8, "temperature": 0, "stream": True, "messages": ASK}
    with httpx.stream("POST", tools_server.url + "/v1/messages", json=body, timeout=60) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        frames = response.read().decode().split("\n\n")
    assert frames[-1] == ""  # every frame ends with a blank line, and nothing follows the last (no [DONE])
    events = []
    for frame in frames[:-1]:
        name, data = frame.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == "event: " + event["type"]
        events.append(event)
    deltas = events[2:-3]
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * len(deltas),
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0]["message"]
    assert (start["content"], start["stop_reason"], start["usage"]["output_tokens"]) == ([], None, 0)
    assert events[1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    assert deltas and all(e["index"] == 0 and e["delta"]["type"] == "text_delta" for e in deltas)
    assert events[-3] == {"type": "content_block_stop", "index": 0}
    assert events[-2] == {
        "type": "message_delta",
        "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
        "usage": {"output_tokens": 8},
    }
    assert all("timings" not in e for e in events)


def test_the_body_renders_the_prompt_its_openai_conversion_renders(
    client: anthropic.Anthropic, tools_server: ServerThread
) -> None:
    history = [
        {"role": "user", "content": [{"type": "text", "text": "Weather"}, {"type": "text", "text": " in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Ask the tool.", "signature": ""},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "Sunny, 25°C"}]},
    ]
    converted = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": [{"type": "text", "text": "Weather"}, {"type": "text", "text": " in Paris?"}]},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Ask the tool.",
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "Sunny, 25°C"},
    ]
    prompt = post(tools_server, "/apply-template", {"messages": converted, "tools": [OPENAI_WEATHER]}).json()["prompt"]
    assert SYSTEM in prompt and "Sunny, 25°C" in prompt and "get_weather" in prompt
    n_tokens = _count(client, system=SYSTEM, messages=history, tools=[WEATHER])
    assert n_tokens == _input_tokens(tools_server, {"messages": converted, "tools": [OPENAI_WEATHER]})
    without_system = _count(client, messages=history, tools=[WEATHER])
    assert without_system == _input_tokens(tools_server, {"messages": converted[1:], "tools": [OPENAI_WEATHER]})
    assert without_system < n_tokens
    # The tool result round trip generates an answer to it.
    answer = client.messages.create(model="tiny", max_tokens=4, extra_body=GREEDY, messages=history)  # type: ignore[arg-type]
    assert [block.type for block in answer.content] == ["text"] and answer.stop_reason == "max_tokens"


def test_a_named_tool_comes_back_as_a_tool_use_block_whole_and_streamed(client: anthropic.Anthropic) -> None:
    request: dict[str, Any] = {
        "model": "tiny",
        "max_tokens": 200,
        "extra_body": GREEDY,
        "messages": ASK,
        "tools": [WEATHER],
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    }
    message = client.messages.create(**request)
    assert message.stop_reason == "tool_use" and len(message.content) == 1
    call = message.content[0]
    assert call.type == "tool_use" and call.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(call.input, WEATHER["input_schema"])
    with client.messages.stream(**request) as stream:
        events = list(stream)
        final = stream.get_final_message()
    streamed = final.content[0]
    assert final.stop_reason == "tool_use" and streamed.type == "tool_use"
    assert (streamed.name, streamed.input) == (call.name, call.input)
    starts = [e for e in events if e.type == "content_block_start"]
    assert [(e.index, e.content_block.type) for e in starts] == [(0, "tool_use")]
    json_deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert [d.type for d in json_deltas] == ["input_json_delta"]
    assert json.loads(json_deltas[0].partial_json) == call.input  # type: ignore[union-attr]


def test_any_tool_and_no_tool(client: anthropic.Anthropic) -> None:
    base: dict[str, Any] = {
        "model": "tiny",
        "max_tokens": 200,
        "extra_body": GREEDY,
        "messages": ASK,
        "tools": [WEATHER],
    }
    forced = client.messages.create(**base, tool_choice={"type": "any"})
    assert forced.stop_reason == "tool_use" and {b.type for b in forced.content} == {"tool_use"}
    hidden = client.messages.create(**{**base, "max_tokens": 6}, tool_choice={"type": "none"})
    assert (hidden.stop_reason, [b.type for b in hidden.content]) == ("max_tokens", ["text"])


def test_a_stop_sequence_ends_the_text_before_it(client: anthropic.Anthropic) -> None:
    request: dict[str, Any] = {"model": "tiny", "max_tokens": 16, "extra_body": GREEDY, "messages": ASK}
    text = client.messages.create(**request).content[0].text
    at = next(i for i, char in enumerate(text) if i > 0 and char.isascii() and char.isalpha() and text.find(char) == i)
    message = client.messages.create(**request, stop_sequences=["\x00never", text[at]])
    assert message.content[0].text == text[:at]
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", text[at])
    assert message.usage.output_tokens < 16


def test_the_suites_bodies_are_answered(tools_server: ServerThread) -> None:
    """The shapes test_compat_anthropic.py checks on the fields it sends (with a short answer)."""
    extras: list[dict[str, Any]] = [
        {"system": [{"type": "text", "text": SYSTEM}]},
        {"temperature": 0.5, "top_p": 0.9, "top_k": 40},
        {"metadata": {"user_id": "test_user_123"}},
        {"thinking": {"type": "enabled", "budget_tokens": 50}},
        {"thinking": {"type": "adaptive", "display": "omitted"}},
        {"stop_sequences": ["\n", "END"]},
    ]
    for extra in extras:
        response = post(tools_server, "/v1/messages", {"model": "test", "max_tokens": 3, "messages": ASK, **extra})
        assert response.status_code == 200, response.text
        body = response.json()
        assert set(body) == {"id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage"}
        assert set(body["usage"]) == {"cache_read_input_tokens", "input_tokens", "output_tokens"}
    count = post(tools_server, "/v1/messages/count_tokens", {"model": "test", "messages": ASK})
    assert count.status_code == 200 and list(count.json()) == ["input_tokens"]


def test_an_image_on_a_text_model_is_refused_clearly(client: anthropic.Anthropic, tools_server: ServerThread) -> None:
    question: list[Any] = [{"role": "user", "content": [IMAGE, {"type": "text", "text": "What is this?"}]}]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="tiny", max_tokens=4, messages=question)
    assert caught.value.status_code == 400
    assert caught.value.body == {
        "error": {"code": 400, "message": NO_MMPROJ, "type": "invalid_request_error", "param": "messages.0.content.0"}
    }
    inside_a_result = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [IMAGE]}]},
    ]
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        response = post(tools_server, path, {"max_tokens": 4, "messages": inside_a_result})
        assert (response.status_code, response.json()["error"]["message"]) == (400, NO_MMPROJ)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            {"max_tokens": 5},
            {"message": "Missing required field 'messages'", "param": "messages"},
        ),
        (
            {"messages": [{"role": "bot", "content": "Hi"}]},
            {
                "message": "Invalid value for 'messages.0.role': Input should be 'user' or 'assistant' (got 'bot')",
                "param": "messages.0.role",
            },
        ),
        (
            {"messages": ASK, "tool_choice": {"type": "tool", "name": "nope"}, "tools": [WEATHER]},
            {"message": "tool_choice names 'nope', which is not in 'tools'", "param": "tool_choice"},
        ),
    ],
)
def test_bad_bodies_are_400s_in_llama_servers_error_shape(
    tools_server: ServerThread, body: dict[str, Any], error: dict[str, str]
) -> None:
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        response = post(tools_server, path, body)
        assert response.status_code == 400
        assert response.json() == {"error": {"code": 400, "type": "invalid_request_error", **error}}
    broken = httpx.post(tools_server.url + "/v1/messages", content=b"{", timeout=10)
    assert broken.status_code == 400 and broken.json()["error"]["message"].startswith("Invalid JSON body:")


def test_the_x_api_key_header_is_the_api_key(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    server = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=2, api_key=("k1",)))
    with anthropic.Anthropic(base_url=server.url, api_key="k1", max_retries=0) as right:
        message = right.messages.create(model="tiny", max_tokens=2, messages=ASK)
    assert message.usage.output_tokens == 2
    with (
        pytest.raises(anthropic.AuthenticationError) as caught,
        anthropic.Anthropic(base_url=server.url, api_key="k2", max_retries=0) as wrong,
    ):
        wrong.messages.count_tokens(model="tiny", messages=ASK)
    assert caught.value.body == {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}
    assert post(server, "/v1/messages/count_tokens", {"messages": ASK}, headers={"x-api-key": "k1"}).status_code == 200
