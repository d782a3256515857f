"""Tool-call and reasoning parsing on exact strings, whole and streamed at every character boundary."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from lfmserve.chat.output import AssistantMessage, AssistantOutputParser, OutputDelta
from tests.conftest import ASK, ServerThread

S, E = "<|tool_call_start|>", "<|tool_call_end|>"


def _summary(message: AssistantMessage) -> dict[str, Any]:
    return {
        "content": message.content,
        "reasoning": message.reasoning,
        "calls": [(c.index, c.name, json.loads(c.arguments)) for c in message.calls],
    }


def _streamed(text: str, cut: int, **options: bool) -> AssistantMessage:
    parser = AssistantOutputParser(**options)
    message = AssistantMessage()
    for delta in parser.feed(text[:cut]) + parser.feed(text[cut:]) + parser.finish():
        assert sum(bool(x) for x in (delta.content, delta.reasoning, delta.call)) == 1
        assert S not in delta.content or "not a call" in text  # markup never leaks as content
        message.add(delta)
    return message


CASES: list[tuple[str, dict[str, Any]]] = [
    (
        f'Let me check.{S}[get_weather(city="Paris", days=3)]{E}',
        {"content": "Let me check.", "reasoning": "", "calls": [(0, "get_weather", {"city": "Paris", "days": 3})]},
    ),
    (
        f"{S}[a(x=1), b.c(y=[1, 2])]{E}{S}[d()]{E} done",
        {"content": " done", "reasoning": "", "calls": [(0, "a", {"x": 1}), (1, "b.c", {"y": [1, 2]}), (2, "d", {})]},
    ),
    (
        "<think>\nThe user wants weather.\n</think>\n\nSure." + f'{S}[{{"name": "w", "arguments": {{"c": "P"}}}}]{E}',
        {"content": "Sure.", "reasoning": "The user wants weather.", "calls": [(0, "w", {"c": "P"})]},
    ),
    (
        "Intro <think> a  b </think> tail",
        {"content": "Intro tail", "reasoning": "a  b", "calls": []},
    ),
    (
        "<think>cut off by the limit <thi",
        {"content": "", "reasoning": "cut off by the limit <thi", "calls": []},
    ),
    (
        f"not a call {S}[f(x=y)]{E} end",
        {"content": f"not a call {S}[f(x=y)]{E} end", "reasoning": "", "calls": []},
    ),
    (
        f"truncated {S}[f(x=1",  # cut before one call was whole: the tail is dropped, no marker is content
        {"content": "truncated ", "reasoning": "", "calls": []},
    ),
    (  # call after call until the limit cut the list: the whole calls count, the cut one is dropped
        f'{S}[cam(camera="front_door"), cam(camera="back"), cam(camera="ga',
        {
            "content": "",
            "reasoning": "",
            "calls": [(0, "cam", {"camera": "front_door"}), (1, "cam", {"camera": "back"})],
        },
    ),
    (  # brackets, quotes and escapes inside strings do not end a call; Python and JSON literals both read
        S + r"""[run(code="print(')')\n\"", ok=True, none=None, j=null), f(d={"a": [1, {"b": "]"}]})]""" + E,
        {
            "content": "",
            "reasoning": "",
            "calls": [
                (0, "run", {"code": "print(')')\n\"", "ok": True, "none": None, "j": None}),
                (1, "f", {"d": {"a": [1, {"b": "]"}]}}),
            ],
        },
    ),
    (  # a list whose second item is no call: the first counts, the second comes back as text
        f"{S}[a(x=1), b(x=y)]{E}",
        {"content": "b(x=y)", "reasoning": "", "calls": [(0, "a", {"x": 1})]},
    ),
    (  # JSON objects, cut in the second one
        f'{S}[{{"name": "w", "arguments": {{"c": "P"}}}}, {{"name": "w", "argu',
        {"content": "", "reasoning": "", "calls": [(0, "w", {"c": "P"})]},
    ),
    (
        "a < b and <|tool_call_sta is just text <|",
        {"content": "a < b and <|tool_call_sta is just text <|", "reasoning": "", "calls": []},
    ),
    ("", {"content": "", "reasoning": "", "calls": []}),
    ("  Leading spaces stay </thin", {"content": "  Leading spaces stay </thin", "reasoning": "", "calls": []}),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_whole_messages_split_into_content_reasoning_and_calls(text: str, expected: dict[str, Any]) -> None:
    parser = AssistantOutputParser(split_reasoning=True, parse_tool_calls=True)
    assert _summary(parser.parse(text)) == expected


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_streams_split_at_every_character_agree_with_the_whole_message(text: str, expected: dict[str, Any]) -> None:
    for cut in range(len(text) + 1):
        assert _summary(_streamed(text, cut, split_reasoning=True, parse_tool_calls=True)) == expected, cut


def test_streaming_one_character_at_a_time() -> None:
    text = CASES[2][0] + f" and {S}[g(k=False)]{E}"
    parser = AssistantOutputParser(split_reasoning=True, parse_tool_calls=True)
    message = AssistantMessage()
    kinds = []
    for char in text:
        for delta in parser.feed(char):
            message.add(delta)
            kinds.append("reasoning" if delta.reasoning else "call" if delta.call else "content")
    for delta in parser.finish():
        message.add(delta)
    assert _summary(message)["calls"] == [(0, "w", {"c": "P"}), (1, "g", {"k": False})]
    assert message.content == "Sure. and "
    assert kinds.index("content") > max(i for i, k in enumerate(kinds) if k == "reasoning")  # reasoning first


def test_reasoning_format_none_and_no_tools_pass_text_through() -> None:
    text = f"<think>x</think>{S}[f()]{E}"
    parser = AssistantOutputParser(split_reasoning=False, parse_tool_calls=False)
    assert _summary(parser.parse(text)) == {"content": text, "reasoning": "", "calls": []}
    calls_only = AssistantOutputParser(split_reasoning=False, parse_tool_calls=True).parse(text)
    assert (calls_only.content, [c.name for c in calls_only.calls]) == ("<think>x</think>", ["f"])


def test_a_prompt_that_opens_the_think_block_starts_in_reasoning() -> None:
    parser = AssistantOutputParser(split_reasoning=True, parse_tool_calls=False, starts_in_reasoning=True)
    assert _summary(parser.parse("plan\n</think>answer")) == {"content": "answer", "reasoning": "plan", "calls": []}


def test_call_ids_are_openai_shaped_and_distinct() -> None:
    message = AssistantOutputParser(split_reasoning=False, parse_tool_calls=True).parse(f"{S}[a(), b()]{E}")
    ids = [c.id for c in message.calls]
    assert all(i.startswith("call_") and len(i) == 29 for i in ids) and len(set(ids)) == 2
    assert message.calls[0].to_json() == {
        "id": ids[0],
        "type": "function",
        "function": {"name": "a", "arguments": "{}"},
    }


# -- end to end: the reasoning split over the API --------------------------------------------------------
THINKING = 'root ::= "<think>" [a-z]{2,12} " plan</think>" [A-Z][a-z ]{3,20}'


def test_reasoning_is_split_from_content_whole_and_streamed(client: openai.OpenAI) -> None:
    request: dict[str, Any] = {"messages": ASK, "max_tokens": 60, "seed": 4, "extra_body": {"grammar": THINKING}}
    message = client.chat.completions.create(model="tiny", **request).choices[0].message
    reasoning = message.model_extra["reasoning_content"] if message.model_extra else None
    assert reasoning and reasoning.endswith(" plan") and "<think>" not in reasoning
    assert message.content and message.content[0].isupper() and "think>" not in message.content
    kinds, joined = [], {"reasoning_content": "", "content": ""}
    for chunk in client.chat.completions.create(model="tiny", stream=True, **request):
        delta = chunk.choices[0].delta.model_dump(exclude_none=True) if chunk.choices else {}
        for key in joined:
            if delta.get(key):
                joined[key] += delta[key]
                kinds.append(key)
    assert joined == {"reasoning_content": reasoning, "content": message.content}
    assert kinds.index("content") > kinds.index("reasoning_content")
    raw = client.chat.completions.create(
        model="tiny", **{**request, "extra_body": {**request["extra_body"], "reasoning_format": "none"}}
    )
    assert raw.choices[0].message.content == f"<think>{reasoning}</think>{message.content}"


def test_a_think_block_cut_off_is_all_reasoning(tools_server: ServerThread) -> None:
    body = {"messages": ASK, "max_tokens": 4, "grammar": THINKING, "seed": 4}
    choice = httpx.post(tools_server.url + "/v1/chat/completions", json=body).json()["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] == "" and choice["message"]["reasoning_content"]


def test_each_call_is_handed_on_as_soon_as_its_brackets_close() -> None:
    parser = AssistantOutputParser(split_reasoning=False, parse_tool_calls=True)
    assert parser.feed(f'{S}[a(x="),"') == []
    first = parser.feed("), b(")
    assert [(d.call.name, d.call.arguments) for d in first if d.call] == [("a", '{"x": "),"}')]
    second = parser.feed("y=[1])")
    assert [(d.call.index, d.call.name) for d in second if d.call] == [(1, "b")]
    assert parser.feed(f"]{E} ok") + parser.finish() == [OutputDelta(content=" ok")]


MARKERLESS: list[tuple[str, dict[str, Any]]] = [
    ('[get_weather(city="Paris")] Done.', {"content": " Done.", "calls": [(0, "get_weather", {"city": "Paris"})]}),
    ('  [ get_weather(city="A"), get_weather(city="B")]', {"content": "", "calls": [
        (0, "get_weather", {"city": "A"}), (1, "get_weather", {"city": "B"})]}),
    ('<think>hm</think>[get_weather(city="Oslo")]', {"content": "", "calls": [(0, "get_weather", {"city": "Oslo"})]}),
    ('Sure: [get_weather(city="Paris")]', {"content": 'Sure: [get_weather(city="Paris")]', "calls": []}),
    ("[1, 2, 3] are numbers", {"content": "[1, 2, 3] are numbers", "calls": []}),
    ("[getting started]", {"content": "[getting started]", "calls": []}),
    ('[get_weather(city="Pa', {"content": "", "calls": []}),  # cut: dropped, as a cut block with markers
    ("[get_weather(city=x)] no", {"content": "[get_weather(city=x)] no", "calls": []}),
    ("[", {"content": "[", "calls": []}),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), MARKERLESS)
def test_a_call_list_without_markers_at_the_start_is_read_when_it_names_a_tool(
    text: str, expected: dict[str, Any]
) -> None:
    names = frozenset({"get_weather"})
    for pieces in ([text], list(text)):
        parser = AssistantOutputParser(split_reasoning=True, parse_tool_calls=True, tool_names=names)
        message = AssistantMessage()
        for delta in [d for piece in pieces for d in parser.feed(piece)] + parser.finish():
            message.add(delta)
        calls = [(c.index, c.name, json.loads(c.arguments)) for c in message.calls]
        assert {"content": message.content, "calls": calls} == expected, pieces[:3]
    plain = AssistantOutputParser(split_reasoning=True, parse_tool_calls=True).parse(MARKERLESS[0][0])
    assert plain.calls == [] and plain.content == MARKERLESS[0][0]  # without the tools' names, text stays text
