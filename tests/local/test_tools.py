"""The in-process API's tools, structured output and reasoning: the same requests give what the server gives."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import jsonschema
import pytest
from pydantic import BaseModel, Field

import lfmserve
from lfmserve.errors import InvalidRequest
from lfmserve.results import ContentDelta, FinalMessage, ReasoningDelta, Stats, ToolCall, ToolCallDelta
from lfmserve.testing import LFM2_CHAT_TEMPLATE
from tests.conftest import ASK, TOOLS, WEATHER, ServerThread, post

NAMED = {"type": "function", "function": {"name": "get_weather"}}


@pytest.fixture(scope="module")
def model(tiny_gguf: Path) -> Iterator[lfmserve.Model]:
    """The tiny model as ``tools_server`` loads it (room for tool lists)."""
    with lfmserve.Model(tiny_gguf, n_ctx=8192, n_parallel=2, n_threads=2) as m:
        yield m


def served_chat(server: ServerThread, **body: Any) -> dict[str, Any]:
    response = post(server, "/v1/chat/completions", {"temperature": 0, **body})
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_named_tool_call_streams_and_parses_as_the_server_answers_it(
    model: lfmserve.Model, tools_server: ServerThread
) -> None:
    chat = model.chat(tools=TOOLS)
    events = list(chat.events(ASK[0]["content"], tool_choice=NAMED, temperature=0))
    served = served_chat(tools_server, messages=ASK, tools=TOOLS, tool_choice=NAMED)
    choice = served["choices"][0]
    [wire_call] = choice["message"]["tool_calls"]
    assert [type(e) for e in events] == [ToolCallDelta, Stats, FinalMessage]
    delta, stats, final = events
    assert isinstance(delta, ToolCallDelta) and isinstance(stats, Stats) and isinstance(final, FinalMessage)
    result = final.result
    [call] = result.tool_calls
    assert call.name == wire_call["function"]["name"] == "get_weather"
    assert call.arguments == json.loads(wire_call["function"]["arguments"])
    jsonschema.validate(call.arguments, WEATHER["function"]["parameters"])
    assert (delta.index, delta.id, delta.name, json.loads(delta.arguments)) == (0, call.id, call.name, call.arguments)
    assert (result.content, result.reasoning, result.finish_reason) == ("", None, choice["finish_reason"])
    assert result.finish_reason == "tool_calls"
    assert result.usage is not None and stats.usage == result.usage
    assert result.usage.prompt_tokens == served["usage"]["prompt_tokens"]
    assert result.usage.completion_tokens == served["usage"]["completion_tokens"]
    assert chat.messages[-1] == result.message()


def test_a_tool_result_goes_back_and_the_next_reply_reuses_the_cache(
    model: lfmserve.Model, tools_server: ServerThread
) -> None:
    chat = model.chat(tools=TOOLS)
    call = chat.reply(ASK[0]["content"], tool_choice="required", temperature=0).tool_calls[0]
    assert isinstance(call, ToolCall) and call.name in {"get_weather", "web.search"}
    closed = chat.rendered_tokens()
    assert chat.cached_tokens() == closed
    chat.add_tool_result(call, {"temp_c": 21})
    assert chat.messages[-1] == {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 21}'}
    history = list(chat.messages)
    answer = chat.reply(temperature=0, max_tokens=4)
    served = served_chat(tools_server, messages=history, tools=TOOLS, max_tokens=4)
    assert answer.content == served["choices"][0]["message"]["content"]
    assert answer.usage is not None and answer.usage.prompt_tokens == served["usage"]["prompt_tokens"]
    turn = chat.last_turn
    # the closed call turn was all cached; only the tool message and the generation prompt were prefilled
    assert turn is not None and turn.n_cached_tokens == len(closed) == answer.usage.cached_tokens
    assert chat.cached_tokens() == chat.rendered_tokens()


def test_tool_choice_none_hides_the_tools_from_the_template(model: lfmserve.Model, tools_server: ServerThread) -> None:
    chat = model.chat(tools=TOOLS)
    result = chat.reply(ASK[0]["content"], tool_choice="none", temperature=0, max_tokens=3)
    served = served_chat(tools_server, messages=ASK, max_tokens=3)  # no tools at all
    assert result.tool_calls == () and result.content == served["choices"][0]["message"]["content"]
    assert result.usage is not None and result.usage.prompt_tokens == served["usage"]["prompt_tokens"]
    assert chat.cached_tokens() == chat.rendered_tokens()


def test_refused_turns_leave_the_history_as_it_was(model: lfmserve.Model) -> None:
    chat = model.chat(system="Be brief.", tools=TOOLS)
    named = {"type": "function", "function": {"name": "nope"}}
    with pytest.raises(InvalidRequest, match="tool_choice names 'nope', which is not in 'tools'") as info:
        chat.send("Hi", tool_choice=named)
    assert info.value.param == "tool_choice"
    with pytest.raises(InvalidRequest, match=r"reply\(\) without text answers tool results"):
        chat.reply()
    with pytest.raises(InvalidRequest, match="tools.0 is not an OpenAI function tool"):
        chat.reply("Hi", tools=[{"type": "function"}])
    assert chat.messages == [{"role": "system", "content": "Be brief."}]


class Weather(BaseModel):
    city: Annotated[str, Field(max_length=8)]
    days: Annotated[int, Field(ge=1, le=7)]


def test_a_pydantic_response_format_comes_back_parsed(model: lfmserve.Model, tools_server: ServerThread) -> None:
    result = model.chat().reply("Weather in Paris as JSON?", response_format=Weather, temperature=0, max_tokens=60)
    wire = {"type": "json_schema", "json_schema": {"name": "Weather", "schema": Weather.model_json_schema()}}
    messages = [{"role": "user", "content": "Weather in Paris as JSON?"}]
    served = served_chat(tools_server, messages=messages, response_format=wire, max_tokens=60)
    content = served["choices"][0]["message"]["content"]
    assert result.finish_reason == served["choices"][0]["finish_reason"] == "stop"
    assert result.content == content
    assert isinstance(result.parsed, Weather) and result.parsed == Weather.model_validate_json(content)


def test_a_call_beside_a_response_format_is_no_parsed_answer(model: lfmserve.Model, tools_server: ServerThread) -> None:
    asked = {"tools": TOOLS, "tool_choice": NAMED, "temperature": 0, "max_tokens": 300}
    result = model.chat().reply(ASK[0]["content"], response_format=Weather, **asked)
    wire = {"type": "json_schema", "json_schema": {"name": "Weather", "schema": Weather.model_json_schema()}}
    served = served_chat(tools_server, messages=ASK, response_format=wire, **asked)["choices"][0]
    [wire_call] = served["message"]["tool_calls"]
    assert [(call.name, call.arguments) for call in result.tool_calls] == [
        (wire_call["function"]["name"], json.loads(wire_call["function"]["arguments"]))
    ]
    assert (result.parsed, result.content, result.finish_reason) == (None, "", served["finish_reason"])
    assert result.finish_reason == "tool_calls"


def test_a_json_schema_dict_constrains_without_parsing(model: lfmserve.Model) -> None:
    schema = Weather.model_json_schema()
    result = model.chat().reply(
        "Weather?", response_format={"type": "json_schema", "json_schema": {"schema": schema}}, temperature=0
    )
    assert result.parsed is None and result.finish_reason == "stop"
    jsonschema.validate(json.loads(result.content or ""), schema)


#: The tiny template, opening a think block in the generation prompt unless ``enable_thinking`` is false.
THINKING_TEMPLATE = LFM2_CHAT_TEMPLATE.replace(
    '{{- "<|im_start|>assistant\\n" -}}',
    '{{- "<|im_start|>assistant\\n" -}}{%- if enable_thinking -%}{{- "<think>\\n" -}}{%- endif -%}',
)


@pytest.fixture(scope="module")
def thinking_model(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[lfmserve.Model]:
    assert THINKING_TEMPLATE != LFM2_CHAT_TEMPLATE
    path = tmp_path_factory.mktemp("templates") / "thinking.jinja"
    path.write_text(THINKING_TEMPLATE, encoding="utf-8")
    with lfmserve.Model(tiny_gguf, n_ctx=2048, n_threads=2, chat_template_file=str(path)) as m:
        yield m


def test_thinking_switches_the_template_and_the_reasoning_split(thinking_model: lfmserve.Model) -> None:
    [ocean] = thinking_model.tokenize(" ocean", parse_special=False)
    only_ocean: dict[str, Any] = {"temperature": 0, "max_tokens": 4, "logit_bias": ((ocean, 100.0),)}
    thought = thinking_model.chat()
    events = list(thought.events("Hi", **only_ocean))  # the template thinks by default
    result = events[-1].result if isinstance(events[-1], FinalMessage) else None
    assert result is not None and (result.reasoning, result.content) == ("ocean ocean ocean ocean", "")
    assert {type(e) for e in events[:-2]} == {ReasoningDelta}
    said = thinking_model.chat().reply("Hi", thinking=False, **only_ocean)
    assert (said.reasoning, said.content) == (None, " ocean ocean ocean ocean")
    assert result.usage is not None and said.usage is not None
    assert result.usage.prompt_tokens - said.usage.prompt_tokens == len(thinking_model.tokenize("<think>\n"))
    assert thought.messages[-1] == {"role": "assistant", "content": "", "reasoning_content": "ocean ocean ocean ocean"}
    assert list(thinking_model.chat().stream("Hi", thinking=True, **only_ocean)) == []  # no content to stream
    assert [e for e in events if isinstance(e, ContentDelta)] == []
