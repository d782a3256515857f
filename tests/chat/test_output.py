"""Tool-call and reasoning parsing on exact strings, whole and streamed at every character boundary."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lfmserve.chat.output import AssistantMessage, AssistantOutputParser
from lfmserve.chat.tool_calls import ParsedCall, format_calls, parse_call_block

S, E = "<|tool_call_start|>", "<|tool_call_end|>"


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            '[get_weather(city="Paris", days=3, ok=True, xs=[1, 2])]',
            [ParsedCall("get_weather", {"city": "Paris", "days": 3, "ok": True, "xs": [1, 2]})],
        ),
        ("[f(a='v'), g()]", [ParsedCall("f", {"a": "v"}), ParsedCall("g", {})]),
        ("[math.sqrt(x=4.5)]", [ParsedCall("math.sqrt", {"x": 4.5})]),
        ("f(n=None, t=(1, 2))", [ParsedCall("f", {"n": None, "t": [1, 2]})]),
        ('[f(o={"a": true, "b": null, "c": [false]})]', [ParsedCall("f", {"o": {"a": True, "b": None, "c": [False]}})]),
        (
            '[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "g", "arguments": "{\\"k\\": 1}"}]',
            [ParsedCall("get_weather", {"city": "Paris"}), ParsedCall("g", {"k": 1})],
        ),
        ('{"name": "a.b", "arguments": {}}', [ParsedCall("a.b", {})]),
        ("[f(x=-1, y=1e3)]", [ParsedCall("f", {"x": -1, "y": 1000.0})]),
    ],
)
def test_call_blocks_parse_to_names_and_literal_arguments(block: str, expected: list[ParsedCall]) -> None:
    assert parse_call_block(block) == expected


@pytest.mark.parametrize(
    "block",
    [
        "",
        "[]",
        "[f(x=os.system('rm -rf /'))]",  # a call inside an argument is never evaluated
        "[f(x=y)]",  # a bare name is not a literal
        "[f('positional')]",
        "[f(**kw)]",
        "[f(x={1, 2})]",  # sets are not JSON
        "[f(x=1e999)]",  # infinity is not JSON
        "[f(x=1)",  # truncated
        "[1, 2]",
        "[(lambda: 1)()]",
        '[{"arguments": {}}]',
        '[{"name": "f", "arguments": [1]}]',
        "just words",
    ],
)
def test_anything_but_literal_calls_is_refused(block: str) -> None:
    assert parse_call_block(block) is None


def test_arguments_are_json_text() -> None:
    call = parse_call_block('[f(s="é \\"q\\"", n=2.5)]')
    assert call is not None and call[0].arguments_json() == '{"s": "é \\"q\\"", "n": 2.5}'


def test_history_calls_are_written_in_the_models_form() -> None:
    calls = [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "ok": True, "n": None}}},
        {"function": {"name": "g", "arguments": {"o": {"a": [1, False]}}}},
    ]
    text = format_calls(calls)
    assert text == S + '[get_weather(city="Paris", days=3, ok=True, n=None), g(o={"a": [1, False]})]' + E
    assert parse_call_block(text[len(S) : -len(E)]) == [
        ParsedCall("get_weather", {"city": "Paris", "days": 3, "ok": True, "n": None}),
        ParsedCall("g", {"o": {"a": [1, False]}}),
    ]


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
        f"truncated (not a call) {S}[f(x=1",
        {"content": f"truncated (not a call) {S}[f(x=1", "reasoning": "", "calls": []},
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


def test_calls_python_cannot_spell_are_written_as_json() -> None:
    calls = [{"function": {"name": "send", "arguments": {"from": "a", "to": "b"}}}]
    text = format_calls(calls)
    assert text == S + '[{"name": "send", "arguments": {"from": "a", "to": "b"}}]' + E
    assert parse_call_block(text[len(S) : -len(E)]) == [ParsedCall("send", {"from": "a", "to": "b"})]
