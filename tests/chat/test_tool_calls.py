"""LFM tool-call text both ways: parsing what the model writes (literals only) and writing calls back into history."""

from __future__ import annotations

import pytest

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


def test_calls_python_cannot_spell_are_written_as_json() -> None:
    calls = [{"function": {"name": "send", "arguments": {"from": "a", "to": "b"}}}]
    text = format_calls(calls)
    assert text == S + '[{"name": "send", "arguments": {"from": "a", "to": "b"}}]' + E
    assert parse_call_block(text[len(S) : -len(E)]) == [ParsedCall("send", {"from": "a", "to": "b"})]
