"""OpenAI's Responses API: the body adapted into the neutral chat request, the response and its event stream
(unit, on fakes), then the routes over real loopback HTTP with the official client, as llama-server's
``test_compat_oai_responses.py`` drives them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal, cast

import httpx
import jsonschema
import openai
import pytest

from lfmserve.api.body import parse_body
from lfmserve.api.openai.protocol import ChatCompletionRequest
from lfmserve.api.openai_responses.protocol import ResponsesRequest
from lfmserve.api.openai_responses.responses import OutputItems, ResponseIds, response_events
from lfmserve.api.sse import sse
from lfmserve.chat.output import AssistantOutputParser
from lfmserve.chat.request import ChatRequest, Message
from lfmserve.chat.serving import Serving
from lfmserve.engine.records import EngineOutput, Timings
from lfmserve.errors import InvalidRequest
from tests.conftest import TIMINGS_KEYS, WEATHER, ServerThread, post

#: WEATHER in the Responses flat shape.
WEATHER_TOOL: dict[str, Any] = {"type": "function", **WEATHER["function"]}
GREEDY: dict[str, Any] = {"temperature": 0, "max_output_tokens": 12}
BOOK: Any = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]
ARGS = '{"city": "Paris", "days": 2}'
#: A turn that called get_weather, and the call's answer.
CALLED: list[dict[str, Any]] = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": ARGS},
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"},
]
CALLED_AS_CHAT: list[dict[str, Any]] = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}],
    },
    {"role": "tool", "content": "sunny, 21 C", "tool_call_id": "call_1"},
]


def _responses(body: dict[str, Any]) -> ChatRequest:
    return parse_body(ResponsesRequest, json.dumps(body).encode()).to_chat_request()


def _chat(body: dict[str, Any]) -> ChatRequest:
    return parse_body(ChatCompletionRequest, json.dumps(body).encode()).to_chat_request()


# -- the body -> the neutral chat request --------------------------------------------------------------
def test_a_full_responses_body_is_the_equivalent_chat_request() -> None:
    responses = _responses(
        {
            "instructions": "Be brief.",
            "input": [
                {"role": "developer", "content": "Use metric units."},
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Look"},
                        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
                    ],
                },
                {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                *CALLED[1:],
            ],
            "tools": [WEATHER_TOOL, {"type": "web_search"}],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": False,
            "max_output_tokens": 7,
            "max_tokens": 99,  # max_output_tokens wins, as llama-server overwrites max_tokens with it
            "reasoning": {"effort": "low", "summary": "auto"},
            "temperature": 0.5,
            "top_p": 0.9,
            "top_k": 3,
        }
    )
    chat = _chat(
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "system", "content": "Use metric units."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Look"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    ],
                },
                {**CALLED_AS_CHAT[1], "content": [{"type": "text", "text": "Checking."}], "reasoning_content": "hmm"},
                CALLED_AS_CHAT[2],
            ],
            "tools": [{"type": "function", "function": {**WEATHER["function"], "strict": True}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": False,
            "max_tokens": 7,
            "reasoning_effort": "low",
            "temperature": 0.5,
            "top_p": 0.9,
            "top_k": 3,
        }
    )
    assert responses == chat


def test_a_string_input_is_one_user_message_and_string_contents_stay_strings() -> None:
    assert _responses({"input": "Hi"}).messages == (Message(role="user", content="Hi"),)
    request = _responses({"input": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})
    assert request.messages == (Message(role="user", content="Hi"), Message(role="assistant", content="Hello"))
    assert request.tools == () and request.tool_choice == "auto" and request.generation.max_tokens is None


def test_assistant_items_after_an_assistant_message_join_it() -> None:
    messages = _responses(
        {
            "input": [
                {"role": "user", "content": "Go"},
                {"type": "message", "role": "assistant", "content": "One."},
                {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
                {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "a", "output": [{"type": "input_text", "text": "A"}]},
                {"type": "function_call", "call_id": "c", "name": "h", "arguments": "{}"},
            ]
        }
    ).messages
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    joined = messages[1]
    assert isinstance(joined.content, tuple) and [p.text for p in joined.content] == ["One.", "No."]
    assert [call["id"] for call in joined.tool_calls] == ["a", "b"]
    assert messages[3].tool_calls[0]["function"] == {"name": "h", "arguments": "{}"}


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        ({}, "Missing required field 'input'", "input"),
        ({"input": 3}, "Invalid value for 'input': Input should be a valid string (got 3)", "input"),
        ({"input": []}, "'input' must not be empty", "input"),
        ({"input": [{"content": "x"}]}, "Invalid value for 'input.0': Cannot determine type of 'item'", "input.0"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "'input_file' is not supported by llamacpp at this moment",
            "input",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "text", "text": "chat's part"}]}]},
            "Invalid value for 'input.0.input_message.content.0': Input tag 'text' found",
            "input.0.input_message.content.0",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": {"url": "x"}}]}]},
            "Invalid value for 'input.0.input_message.content.0.input_image.image_url'",
            "input.0.input_message.content.0.input_image.image_url",
        ),
        (
            {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "Missing required field 'input.0.function_call.call_id'",
            "input.0.function_call.call_id",
        ),
        (
            {"input": [{"type": "reasoning", "summary": [], "content": []}]},
            "Invalid value for 'input.0.reasoning.content'",
            "input.0.reasoning.content",
        ),
        ({"input": "x", "previous_response_id": "resp_1"}, "llama.cpp does not support", "previous_response_id"),
        ({"input": "x", "tools": [{"type": "function"}]}, "Missing required field 'tools.0.function.name'", None),
        (  # the shared body parser names the union member, as for chat's NamedToolChoice
            {"input": "x", "tool_choice": {"type": "function"}},
            "Missing required field 'tool_choice.FunctionChoice.name'",
            None,
        ),
        ({"input": "x", "max_output_tokens": "8"}, "Invalid value for 'max_output_tokens'", "max_output_tokens"),
        (
            {"input": "x", "text": {"format": {"type": "json_schema", "name": "s"}}},
            "Invalid value for 'text.format': Value error, type 'json_schema' needs a schema",
            "text.format",
        ),
        ({"input": "x", "temperature": "hot"}, "Invalid value for 'temperature'", "temperature"),
    ],
)
def test_malformed_bodies_are_400s_naming_the_field(body: dict[str, Any], message: str, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as caught:
        _responses(body)
    assert caught.value.message.startswith(message)
    assert caught.value.param == (param or message.split("'")[1])


def test_text_format_is_the_response_format_and_llama_servers_extra_wins() -> None:
    schema, other = {"type": "object", "properties": {"a": {"type": "integer"}}}, {"type": "array"}
    formats = [{"type": "json_schema", "name": "s", "schema": schema}, {"type": "json_object"}, {"type": "text"}]
    read = [_responses({"input": "x", "text": {"format": f}}).response_schema for f in formats]
    assert read == [schema, {"type": "object"}, None]
    extra = {"type": "json_schema", "json_schema": {"schema": other}}
    both = {"input": "x", "text": {"format": formats[0]}, "response_format": extra}
    assert _responses(both).response_schema == other


# -- the response and its events, on a fake engine -------------------------------------------------------
class _FakeServing:
    model_name = "fake"


def _out(text: str, n_decoded: int, finish: Literal["stop"] | None = None) -> EngineOutput:
    timings = Timings(prompt_n=5, prompt_ms=2.0, predicted_n=n_decoded, predicted_ms=1.0)
    return EngineOutput(
        text=text,
        token_ids=(0,),
        id_slot=0,
        n_prompt_tokens=5,
        n_cached_tokens=1,
        n_decoded=n_decoded,
        timings=timings,
        finish_reason=finish,
    )


PIECES = ["<think>Let me", " see.</think>", "It is", " sunny.", "<|tool_call_start|>[f(a=1)]<|tool_call_end|>"]


def _events(body: dict[str, Any], pieces: list[str]) -> list[dict[str, Any]]:
    async def outputs() -> AsyncIterator[EngineOutput]:
        for i, piece in enumerate(pieces):
            yield _out(piece, i + 1, "stop" if i == len(pieces) - 1 else None)

    async def collect() -> list[dict[str, Any]]:
        request = parse_body(ResponsesRequest, json.dumps({"input": "x", "stream": True, **body}).encode())
        parser = AssistantOutputParser(split_reasoning=True, parse_tool_calls=True)
        serving = cast(Serving, _FakeServing())
        return [event async for event in response_events(serving, request, parser, outputs())]

    return asyncio.run(collect())


def test_the_event_sequence_is_llama_servers_with_openais_indexes() -> None:
    events = _events({}, PIECES)
    assert [(e["type"], e.get("output_index")) for e in events] == [
        ("response.created", None),
        ("response.in_progress", None),
        ("response.output_item.added", 0),
        ("response.reasoning_text.delta", 0),
        ("response.reasoning_text.delta", 0),
        ("response.output_item.added", 1),
        ("response.content_part.added", 1),
        ("response.output_text.delta", 1),
        ("response.output_text.delta", 1),
        ("response.output_item.added", 2),
        ("response.function_call_arguments.delta", 2),
        ("response.output_item.done", 0),
        ("response.output_text.done", 1),
        ("response.content_part.done", 1),
        ("response.output_item.done", 1),
        ("response.output_item.done", 2),
        ("response.completed", None),
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    created, completed = events[0]["response"], events[-1]["response"]
    assert created["id"].startswith("resp_") and created["id"] == completed["id"]
    assert created["status"] == "in_progress" and created["output"] == []
    reasoning, message, call = completed["output"]
    assert reasoning["id"].startswith("rs_") and reasoning["content"] == [
        {"text": "Let me see.", "type": "reasoning_text"}
    ]
    assert message["id"].startswith("msg_") and message["content"][0]["text"] == "It is sunny."
    assert call["name"] == "f" and json.loads(call["arguments"]) == {"a": 1}
    assert call["call_id"].startswith("call_") and call["id"] == "fc_" + call["call_id"].removeprefix("call_")
    added = events[9]["item"]
    assert added == {**call, "arguments": "", "status": "in_progress"}
    assert [e["item"] for e in events if e["type"] == "response.output_item.done"] == completed["output"]
    assert completed["status"] == "completed" and completed["model"] == "fake"
    assert completed["usage"] == {
        "input_tokens": 5,
        "output_tokens": len(PIECES),
        "total_tokens": 5 + len(PIECES),
        "input_tokens_details": {"cached_tokens": 1},
    }
    # timings: on the last output's step and on response.completed only (without timings_per_token)
    assert [e["type"] for e in events if "timings" in e] == [
        "response.function_call_arguments.delta",
        "response.completed",
    ]


def test_telemetry_timings_per_token_and_prompt_progress() -> None:
    events = _events({"timings_per_token": True, "return_progress": True}, ["a", "b"])
    in_progress = events[1]
    assert in_progress["type"] == "response.in_progress"
    assert in_progress["prompt_progress"] == {"total": 5, "cache": 1, "processed": 5, "time_ms": 2}
    assert [e["type"] for e in events if "prompt_progress" in e] == ["response.in_progress"]
    timed = [e["type"] for e in events if "timings" in e]
    assert timed == ["response.in_progress", *["response.output_text.delta"] * 2, "response.completed"]
    assert all(set(e["timings"]) == TIMINGS_KEYS for e in events if "timings" in e)


def test_whole_and_streamed_outputs_are_the_same_items() -> None:
    parser = AssistantOutputParser(split_reasoning=True, parse_tool_calls=True)
    items = OutputItems(ResponseIds("resp_1", "rs_1", "msg_1"))
    for delta in parser.feed("".join(PIECES)) + parser.finish():
        items.add(delta)
    streamed = _events({}, PIECES)[-1]["response"]["output"]
    whole = items.output()
    assert [i["type"] for i in whole] == [i["type"] for i in streamed] == ["reasoning", "message", "function_call"]
    assert whole[0]["content"] == streamed[0]["content"] and whole[1]["content"] == streamed[1]["content"]
    assert (whole[2]["name"], whole[2]["arguments"]) == (streamed[2]["name"], streamed[2]["arguments"])


def test_a_response_output_sent_back_as_input_is_one_assistant_turn() -> None:
    """The client loop: the output items, unchanged, then the call's output, as the next request's input."""
    output = _events({}, PIECES)[-1]["response"]["output"]
    call_id = output[2]["call_id"]
    messages = _responses(
        {"input": [*output, {"type": "function_call_output", "call_id": call_id, "output": "1"}]}
    ).messages
    assert [m.role for m in messages] == ["assistant", "tool"]
    turn = messages[0]
    assert turn.reasoning_content == "Let me see." and isinstance(turn.content, tuple)
    assert [p.text for p in turn.content] == ["It is sunny."]
    assert turn.tool_calls == ({"id": call_id, "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},)
    assert messages[1] == Message(role="tool", content="1", tool_call_id=call_id)


def test_an_error_in_a_stream_is_a_data_frame_openais_client_raises() -> None:
    """llama-server's Responses streams send ``data: {"error": ...}``, which the OpenAI SDK raises as an APIError."""

    async def failing() -> AsyncIterator[dict[str, Any]]:
        yield {"type": "response.created"}
        raise InvalidRequest("boom")

    async def frames() -> bytes:
        response = sse(failing(), done_marker=False, named_events=True, error_as_data=True)
        return b"".join([c if isinstance(c, bytes) else str(c).encode() async for c in response.body_iterator])

    assert asyncio.run(frames()) == (
        b'event: response.created\ndata: {"type": "response.created"}\n\n'
        b'data: {"error": {"code": 400, "message": "boom", "type": "invalid_request_error"}}\n\n'
    )


# -- over HTTP ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client(tiny_server: ServerThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=tiny_server.url + "/v1", api_key="dummy") as opened:
        yield opened


def _input_tokens(server: ServerThread, body: dict[str, Any], path: str = "/v1/responses/input_tokens") -> int:
    response = post(server, path, body)
    assert response.status_code == 200
    data = response.json()
    assert data["object"] == "response.input_tokens" and set(data) == {"object", "input_tokens"}
    return int(data["input_tokens"])


def test_responses_with_openai_library(client: openai.OpenAI, tiny_server: ServerThread) -> None:
    """llama-server's test, its text aside, greedy: sampled, the random tiny model may open a ``<think>`` block,
    which is a reasoning item of its own."""
    res = client.responses.create(model="gpt-4.1", input=BOOK, max_output_tokens=8, temperature=0)
    assert res.id.startswith("resp_") and res.object == "response" and res.status == "completed"
    assert len(res.output) == 1 and res.output[0].type == "message" and res.output[0].id.startswith("msg_")
    assert res.output[0].role == "assistant" and res.output[0].status == "completed"
    assert isinstance(res.output_text, str) and res.output_text
    assert res.model == "tiny-lfm2.gguf" and res.completed_at is not None and res.completed_at >= res.created_at
    assert res.usage is not None and res.usage.output_tokens == 8
    assert res.usage.input_tokens == _input_tokens(tiny_server, {"input": BOOK, "max_output_tokens": 8})
    assert res.usage.total_tokens == res.usage.input_tokens + 8


def test_streamed_deltas_join_to_the_whole_answer(client: openai.OpenAI) -> None:
    """llama-server's stream test, plus the exact event sequence and greedy equality with the whole answer."""
    whole = client.responses.create(model="m", input=BOOK, **GREEDY)
    events: list[Any] = list(client.responses.create(model="m", input=BOOK, stream=True, **GREEDY))
    types = [e.type for e in events]
    n_deltas = types.count("response.output_text.delta")
    assert n_deltas > 0 and types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * n_deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    resp_id, msg_id = events[0].response.id, events[2].item.id
    assert resp_id.startswith("resp_") and msg_id.startswith("msg_")
    assert events[1].response.id == resp_id
    assert all(getattr(e, "item_id", msg_id) == msg_id for e in events)
    assert events[-2].item.id == msg_id
    gathered = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    completed = events[-1].response
    assert completed.id == resp_id and completed.output[0].id == msg_id
    assert gathered == completed.output_text == whole.output_text
    assert completed.usage is not None and whole.usage is not None
    assert completed.usage.output_tokens == whole.usage.output_tokens == 12
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_the_sse_frames_name_their_events_and_end_without_done(tiny_server: ServerThread) -> None:
    body = {"input": "Hello", "stream": True, **GREEDY}
    with httpx.stream("POST", tiny_server.url + "/responses", json=body, timeout=60) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        frames = response.read().decode().split("\n\n")
    assert frames[-1] == ""
    for frame in frames[:-1]:
        event, data = frame.split("\n")
        assert event.startswith("event: ") and data.startswith("data: ")
        assert json.loads(data[6:])["type"] == event[7:]
    assert frames[-2].startswith("event: response.completed\n")


def test_responses_stream_with_llama_telemetry(tiny_server: ServerThread) -> None:
    """llama-server's telemetry test, as it reads the stream; with ``ignore_eos``, as the tiny random model samples
    its end token now and then at temperature 0.8 (once in CI: 6 tokens of 8)."""
    body = {
        "input": "This is a test" * 10,
        "max_output_tokens": 8,
        "temperature": 0.8,
        "ignore_eos": True,
        "stream": True,
        "timings_per_token": True,
        "return_progress": True,
    }
    with httpx.stream("POST", tiny_server.url + "/responses", json=body, timeout=60) as response:
        data = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    progress = [d for d in data if "prompt_progress" in d]
    assert progress and all(d["type"] == "response.in_progress" for d in progress)
    report = progress[0]["prompt_progress"]
    assert report["total"] == _input_tokens(tiny_server, body) and report["processed"] >= report["cache"]
    assert any(d["type"] == "response.output_text.delta" and "timings" in d for d in data)
    assert all(set(d["timings"]) == TIMINGS_KEYS for d in data if "timings" in d)
    completed = data[-1]
    assert completed["type"] == "response.completed" and "timings" in completed
    assert completed["response"]["usage"]["output_tokens"] == 8


def test_max_output_tokens_is_exact_and_the_status_stays_completed(client: openai.OpenAI) -> None:
    """llama-server reports a cut-off answer as ``completed`` (no ``incomplete``), with its exact token count."""
    res = client.responses.create(model="m", input="Tell me a story", max_output_tokens=5, temperature=0)
    assert res.status == "completed" and res.incomplete_details is None
    assert res.usage is not None and res.usage.output_tokens == 5


def test_the_aliases_and_input_tokens_count_the_rendered_prompt(tiny_server: ServerThread) -> None:
    body = {"instructions": "Book", "input": "What is the best book"}
    n_tokens = _input_tokens(tiny_server, body)
    assert _input_tokens(tiny_server, body, "/responses/input_tokens") == n_tokens
    chat = post(tiny_server, "/v1/chat/completions/input_tokens", {"messages": BOOK}).json()
    assert chat["input_tokens"] == n_tokens
    whole = post(tiny_server, "/responses", {**body, **GREEDY}).json()
    assert whole["object"] == "response" and whole["usage"]["input_tokens"] == n_tokens
    assert set(whole) == {"id", "object", "created_at", "completed_at", "model", "status", "output", "usage"}


def test_input_file_and_malformed_bodies_are_400s_over_http(client: openai.OpenAI, tiny_server: ServerThread) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="m",
            input=[{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}],
        )
    assert caught.value.status_code == 400
    assert caught.value.body == {
        "code": 400,
        "message": "'input_file' is not supported by llamacpp at this moment",
        "type": "invalid_request_error",
        "param": "input",
    }
    for path in ("/v1/responses", "/v1/responses/input_tokens"):
        for raw in (b"{not json", b"[]", json.dumps({"input": [{"type": "bogus"}]}).encode()):
            response = httpx.post(tiny_server.url + path, content=raw, timeout=60)
            assert response.status_code == 400, raw
            assert set(response.json()["error"]) >= {"code", "message", "type"}
            assert response.json()["error"]["type"] == "invalid_request_error"


# -- function tools ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tools_client(tools_server: ServerThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=tools_server.url + "/v1", api_key="dummy") as opened:
        yield opened


CALL_WEATHER: dict[str, Any] = {
    "input": "What is the weather in Paris?",
    "tools": [WEATHER_TOOL],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "max_output_tokens": 300,
    "temperature": 0,
}


def _check_call(item: Any) -> dict[str, Any]:
    assert item.type == "function_call" and item.name == "get_weather" and item.status == "completed"
    assert item.call_id.startswith("call_") and item.id == "fc_" + item.call_id.removeprefix("call_")
    arguments: dict[str, Any] = json.loads(item.arguments)
    jsonschema.validate(arguments, WEATHER["function"]["parameters"])
    return arguments


def test_a_named_function_comes_back_as_a_function_call_item(tools_client: openai.OpenAI) -> None:
    res = tools_client.responses.create(model="m", **CALL_WEATHER)
    assert [item.type for item in res.output] == ["function_call"] and res.output_text == ""
    _check_call(res.output[0])


def test_a_streamed_call_is_added_then_its_arguments_then_done(tools_client: openai.OpenAI) -> None:
    whole = tools_client.responses.create(model="m", **CALL_WEATHER)
    events: list[Any] = list(tools_client.responses.create(model="m", stream=True, **CALL_WEATHER))
    types = [e.type for e in events]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.output_item.done",
        "response.completed",
    ]
    added, delta, done = events[2].item, events[3], events[4].item
    assert added.type == "function_call" and added.arguments == "" and added.status == "in_progress"
    assert (added.id, added.call_id, added.name) == (done.id, done.call_id, done.name)
    assert delta.item_id == done.id and delta.delta == done.arguments
    assert _check_call(done) == _check_call(whole.output[0])  # greedy: the same call
    assert events[-1].response.output[0].arguments == done.arguments


def test_the_sdks_stream_helper_assembles_the_same_response(tools_client: openai.OpenAI) -> None:
    """``client.responses.stream`` places deltas by ``output_index``/``content_index``, which llama-server omits."""
    with tools_client.responses.stream(model="m", **CALL_WEATHER) as stream:
        called = stream.get_final_response()
    whole = tools_client.responses.create(model="m", **CALL_WEATHER)
    assert _check_call(called.output[0]) == _check_call(whole.output[0])
    text_request = {"input": BOOK, **GREEDY}
    with tools_client.responses.stream(model="m", **text_request) as stream:
        streamed = stream.get_final_response()
    assert streamed.output_text == tools_client.responses.create(model="m", **text_request).output_text


def test_a_function_call_output_round_trip_renders_as_the_equivalent_chat(tools_server: ServerThread) -> None:
    """The call and its answer reach the prompt as the chat with an assistant tool call and a tool message."""
    body = {"input": CALLED, "tools": [WEATHER_TOOL], "temperature": 0, "max_output_tokens": 16}
    chat = {
        "messages": CALLED_AS_CHAT,
        "tools": [{"type": "function", "function": {**WEATHER["function"], "strict": True}}],
        "temperature": 0,
        "max_tokens": 16,
    }
    prompt = post(tools_server, "/apply-template", chat).json()["prompt"]
    assert "sunny, 21 C" in prompt and "get_weather" in prompt
    n_prompt = len(post(tools_server, "/tokenize", {"content": prompt, "parse_special": True}).json()["tokens"])
    assert _input_tokens(tools_server, body) == n_prompt
    answer = post(tools_server, "/v1/responses", body).json()
    chat_answer = post(tools_server, "/v1/chat/completions", chat).json()
    assert answer["usage"]["input_tokens"] == chat_answer["usage"]["prompt_tokens"] == n_prompt
    text = "".join(part["text"] for item in answer["output"] if item["type"] == "message" for part in item["content"])
    assert text and text == chat_answer["choices"][0]["message"]["content"]
