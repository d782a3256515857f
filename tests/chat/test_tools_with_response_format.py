"""Tools beside a response format, over real HTTP with the official clients: ``auto`` answers a call or JSON that
follows the schema, ``required`` and a named tool a call, ``none`` the schema, in chat completions, Responses
(``text.format``) and Ollama's ``/api/chat`` (``format``), streamed and not.

Two scripted models force the two ways out of ``auto``: one favours ``<|tool_call_start|>`` (it calls wherever it
may), the other ``{`` (it answers JSON). The tool and the schema each allow one text, so every answer is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import openai
import pytest

from lfmserve.chat.tool_calls import CALL_START
from lfmserve.settings import Settings
from lfmserve.testing.scripted import ScriptedLlama, write_scripted_gguf
from tests.conftest import ASK, ServerThread

PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris"]}},
    "required": ["city"],
}
CITY_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}
SCHEMA = {"type": "object", "properties": {"answer": {"const": "sunny"}}, "required": ["answer"]}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}
#: The only answer the schema allows, and the only call the tool allows.
ANSWER = '{"answer": "sunny"}'
CALL = ("get_weather", '{"city": "Paris"}')
FIELDS: dict[str, Any] = {"temperature": 0, "max_tokens": 200}
#: What each scripted model answers under ``auto``: content, calls, finish reason.
AUTO = {"caller": ("", [CALL], "tool_calls"), "answerer": (ANSWER, [], "stop")}

#: The model that calls wherever it may, and the one that answers JSON; both close a call list after one call.
CALLER = ScriptedLlama(words=("little", "bright"), favoured=(CALL_START, "]"), name="Scripted-Caller")
ANSWERER = ScriptedLlama(words=("little", "bright"), favoured=("{", "]"), name="Scripted-Answerer")


def _serve(factory: Callable[..., ServerThread], models_dir: Path, spec: ScriptedLlama) -> ServerThread:
    path = write_scripted_gguf(models_dir / f"{spec.name}.gguf", spec)
    return factory(Settings.of(model=str(path), ctx_size=2048, parallel=2, threads=2))


@pytest.fixture(scope="module")
def caller(server_factory: Callable[..., ServerThread], models_dir: Path) -> ServerThread:
    return _serve(server_factory, models_dir, CALLER)


@pytest.fixture(scope="module")
def answerer(server_factory: Callable[..., ServerThread], models_dir: Path) -> ServerThread:
    return _serve(server_factory, models_dir, ANSWERER)


@pytest.fixture(params=["caller", "answerer"])
def model(request: pytest.FixtureRequest) -> Iterator[tuple[str, openai.OpenAI]]:
    """Each scripted model's name and its OpenAI client."""
    server: ServerThread = request.getfixturevalue(request.param)
    with openai.OpenAI(base_url=server.url + "/v1", api_key="none") as client:
        yield request.param, client


def _chat(client: openai.OpenAI, **request: Any) -> tuple[str | None, list[tuple[str, str]], str]:
    """The whole answer's content, calls and finish reason."""
    choice = client.chat.completions.create(model="m", messages=ASK, **{**FIELDS, **request}).choices[0]  # type: ignore[call-overload]
    calls = [(call.function.name, call.function.arguments) for call in choice.message.tool_calls or []]
    return choice.message.content, calls, choice.finish_reason


def _streamed_chat(client: openai.OpenAI, **request: Any) -> tuple[str, list[tuple[str, str]], str]:
    """The streamed answer, joined as OpenAI documents it: a call's name with its id, then argument fragments."""
    content, finish, calls = "", "", dict[int, list[str]]()
    chunks = client.chat.completions.create(model="m", messages=ASK, stream=True, **FIELDS, **request)  # type: ignore[call-overload]
    for chunk in chunks:
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        finish = choice.finish_reason or finish
        for part in choice.delta.tool_calls or []:
            entry = calls.setdefault(part.index, ["", ""])
            entry[0] += part.function.name or ""
            entry[1] += part.function.arguments or ""
    return content, [(name, arguments) for name, arguments in calls.values()], finish


def test_auto_answers_a_call_or_json_of_the_schema(model: tuple[str, openai.OpenAI]) -> None:
    name, client = model
    request = {"tools": [CITY_TOOL], "response_format": RESPONSE_FORMAT}
    assert _chat(client, **request) == _streamed_chat(client, **request) == AUTO[name]


def test_under_lfm2s_template_a_sampled_answer_is_one_of_the_two(client: openai.OpenAI) -> None:
    """The tiny LFM2, whose template shows the tools, sampled: every answer is the call or the JSON, nothing else."""
    request = {"tools": [CITY_TOOL], "response_format": RESPONSE_FORMAT, "temperature": 1.0}
    answers = [_chat(client, **request, seed=seed) for seed in range(6)]
    assert all(answer in AUTO.values() for answer in answers), answers


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_required_and_a_named_tool_call_even_a_model_that_would_answer(
    answerer: ServerThread, choice: str | dict[str, Any]
) -> None:
    request = {"tools": [CITY_TOOL], "tool_choice": choice, "response_format": RESPONSE_FORMAT}
    with openai.OpenAI(base_url=answerer.url + "/v1", api_key="none") as client:
        assert _chat(client, **request) == _streamed_chat(client, **request) == AUTO["caller"]


def test_none_answers_the_schema_even_for_a_model_that_would_call(caller: ServerThread) -> None:
    request = {"tools": [CITY_TOOL], "tool_choice": "none", "response_format": RESPONSE_FORMAT}
    with openai.OpenAI(base_url=caller.url + "/v1", api_key="none") as client:
        assert _chat(client, **request) == _streamed_chat(client, **request) == AUTO["answerer"]


def test_the_native_json_schema_field_pairs_with_tools_as_response_format_does(answerer: ServerThread) -> None:
    body = {"messages": ASK, "tools": [CITY_TOOL], "json_schema": SCHEMA, **FIELDS}
    message = httpx.post(answerer.url + "/v1/chat/completions", json=body, timeout=60).json()["choices"][0]["message"]
    assert (message["content"], message.get("tool_calls")) == (ANSWER, None)


def test_a_grammar_pairs_with_tools_only_under_tool_choice_none(caller: ServerThread) -> None:
    """llama-server's rule: "Cannot use custom grammar constraints with tools." unless the tools are off."""
    body = {"messages": ASK, "tools": [CITY_TOOL], "grammar": 'root ::= "ok"', **FIELDS}
    refused = httpx.post(caller.url + "/v1/chat/completions", json=body, timeout=60)
    assert (refused.status_code, refused.json()["error"]["param"]) == (400, "grammar")
    assert (
        refused.json()["error"]["message"]
        == "a custom 'grammar' cannot be combined with tools unless tool_choice is 'none'"
    )
    answered = httpx.post(caller.url + "/v1/chat/completions", json={**body, "tool_choice": "none"}, timeout=60)
    assert answered.json()["choices"][0]["message"]["content"] == "ok"


def test_a_schema_llguidance_cannot_compile_is_a_400_naming_response_format(caller: ServerThread) -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}
    body = {"messages": ASK, "tools": [CITY_TOOL], "response_format": response_format, **FIELDS}
    error = httpx.post(caller.url + "/v1/chat/completions", json=body, timeout=60).json()["error"]
    assert (error["param"], error["message"]) == (
        "response_format",
        'unsupported or invalid JSON schema: Unimplemented keys: ["not"]',
    )


# -- Responses: text.format ---------------------------------------------------------------------------------
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "parameters": PARAMETERS}
TEXT_FORMAT = {"format": {"type": "json_schema", "name": "weather", "schema": SCHEMA, "strict": True}}


def _response(client: openai.OpenAI, **request: Any) -> tuple[str, list[tuple[str, str]]]:
    fields = {"input": ASK[0]["content"], "tools": [RESPONSES_TOOL], "text": TEXT_FORMAT, "temperature": 0}
    res = client.responses.create(model="m", max_output_tokens=200, **fields, **request)
    return res.output_text, [(item.name, item.arguments) for item in res.output if item.type == "function_call"]


def _streamed_response(client: openai.OpenAI, **request: Any) -> tuple[str, list[tuple[str, str]]]:
    """The text from its deltas, the calls from their items' added event and their arguments' deltas."""
    fields = {"input": ASK[0]["content"], "tools": [RESPONSES_TOOL], "text": TEXT_FORMAT, "temperature": 0}
    text, names, arguments = "", dict[str, str](), dict[str, str]()
    for event in client.responses.create(model="m", max_output_tokens=200, stream=True, **fields, **request):
        if event.type == "response.output_text.delta":
            text += event.delta
        elif event.type == "response.output_item.added" and event.item.type == "function_call":
            names[event.item.id or ""] = event.item.name
        elif event.type == "response.function_call_arguments.delta":
            arguments[event.item_id] = arguments.get(event.item_id, "") + event.delta
    return text, [(names[item], arguments[item]) for item in names]


def test_responses_text_format_with_tools(model: tuple[str, openai.OpenAI]) -> None:
    name, client = model
    content, calls, _ = AUTO[name]
    assert _response(client) == _streamed_response(client) == (content, calls)


def test_responses_required_calls_even_a_model_that_would_answer(answerer: ServerThread) -> None:
    with openai.OpenAI(base_url=answerer.url + "/v1", api_key="none") as client:
        assert (
            _response(client, tool_choice="required")
            == _streamed_response(client, tool_choice="required")
            == ("", [CALL])
        )


# -- Ollama: format with tools --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["caller", "answerer"])
def test_ollama_chat_format_with_tools(request: pytest.FixtureRequest, name: str) -> None:
    server: ServerThread = request.getfixturevalue(name)
    fields: dict[str, Any] = {"messages": ASK, "tools": [CITY_TOOL], "format": SCHEMA}
    options = {"temperature": 0, "num_predict": 200}
    expected = ("", [("get_weather", {"city": "Paris"})]) if name == "caller" else (ANSWER, [])
    with ollama.Client(host=server.url) as client:
        whole = client.chat(model="m", options=options, **fields)
        calls = [(call.function.name, dict(call.function.arguments)) for call in whole.message.tool_calls or []]
        assert (whole.message.content, calls, whole.done_reason) == (*expected, "stop")
        content, calls = "", []
        for part in client.chat(model="m", options=options, stream=True, **fields):
            content += part.message.content or ""
            calls += [(call.function.name, dict(call.function.arguments)) for call in part.message.tool_calls or []]
        assert (content, calls) == expected
