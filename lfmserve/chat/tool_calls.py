"""LFM tool-call text, both ways: parsing what the model writes and writing calls back into history.

LFM models write ``<|tool_call_start|>[get_weather(city="Paris", days=3), other()]<|tool_call_end|>``:
Python call syntax with literal arguments. The calls are read with :mod:`ast` and only literals are
accepted (``ast.literal_eval`` on each argument), so nothing the model writes is ever evaluated.
The spellings ``true``/``false``/``null`` are read as JSON's, because templates render nested
mappings with ``tojson``. A JSON list ``[{"name": ..., "arguments": {...}}]`` (what the models write
when a system prompt asks for JSON) is accepted too. Names may be dotted (``math.sqrt``).

Example::

    parse_call_block('[get_weather(city="Paris", days=3)]')
    # -> [ParsedCall(name='get_weather', arguments={'city': 'Paris', 'days': 3})]
"""

from __future__ import annotations

import ast
import json
import keyword
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CALL_START = "<|tool_call_start|>"
CALL_END = "<|tool_call_end|>"

_JSON_NAMES = {"true": True, "false": False, "null": None}


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: dict[str, Any]

    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


def parse_call_block(block: str) -> list[ParsedCall] | None:
    """The calls written between the call markers, or None when the text is not a list of calls."""
    text = block.strip()
    if not text:
        return None
    return _parse_json_calls(text) if text[0] in "[{" and _looks_like_json(text) else _parse_python_calls(text)


def _looks_like_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _parse_json_calls(text: str) -> list[ParsedCall] | None:
    value = json.loads(text)
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            return None
        arguments = item.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return None
        if not isinstance(arguments, dict):
            return None
        calls.append(ParsedCall(item["name"], arguments))
    return calls or None


def _parse_python_calls(text: str) -> list[ParsedCall] | None:
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError):  # ValueError: null bytes
        return None
    nodes = tree.elts if isinstance(tree, ast.List) else [tree]
    calls = []
    for node in nodes:
        call = _parse_python_call(node)
        if call is None:
            return None
        calls.append(call)
    return calls or None


def _parse_python_call(node: ast.expr) -> ParsedCall | None:
    if not isinstance(node, ast.Call) or node.args:
        return None
    name = _dotted_name(node.func)
    if name is None:
        return None
    arguments: dict[str, Any] = {}
    for argument in node.keywords:
        if argument.arg is None:  # **kwargs
            return None
        try:
            value = ast.literal_eval(_JsonNames().visit(argument.value))
            json.dumps(value, allow_nan=False)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            return None
        arguments[argument.arg] = _json_shaped(value)
    return ParsedCall(name, arguments)


def _dotted_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _dotted_name(node.value)
        return None if owner is None else f"{owner}.{node.attr}"
    return None


class _JsonNames(ast.NodeTransformer):
    """``true``/``false``/``null`` become constants; any other name stays and fails ``literal_eval``."""

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id in _JSON_NAMES:
            return ast.copy_location(ast.Constant(_JSON_NAMES[node.id]), node)
        return node


def _json_shaped(value: Any) -> Any:
    """Tuples become lists (JSON has no tuples); sets were already refused by ``json.dumps``."""
    if isinstance(value, tuple | list):
        return [_json_shaped(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_shaped(v) for k, v in value.items()}
    return value


def python_spellable(name: str, parameters: Iterable[str]) -> bool:
    """Whether a call to ``name`` with these keyword arguments can be written in Python syntax.

    ``f(from="x")`` or ``f(first-name="x")`` cannot; such calls are written as JSON instead.
    """
    return all(_identifier(part) for part in name.split(".")) and all(_identifier(p) for p in parameters)


def _identifier(text: str) -> bool:
    return text.isidentifier() and not keyword.iskeyword(text)


def format_calls(calls: Sequence[Mapping[str, Any]]) -> str:
    """OpenAI ``tool_calls`` (arguments already decoded to mappings) in the model's own markup.

    Used for templates that ignore ``tool_calls``: the earlier calls are written into the assistant's
    content exactly as the model writes them, so the history reads as it was generated. Calls that
    Python syntax cannot spell are written as the JSON list the parser also reads.
    """
    functions = [call["function"] for call in calls]
    if not all(python_spellable(f["name"], f["arguments"]) for f in functions):
        listed = [{"name": f["name"], "arguments": f["arguments"]} for f in functions]
        return f"{CALL_START}{json.dumps(listed, ensure_ascii=False)}{CALL_END}"
    rendered = []
    for function in functions:
        arguments = ", ".join(f"{key}={_python_literal(value)}" for key, value in function["arguments"].items())
        rendered.append(f"{function['name']}({arguments})")
    return f"{CALL_START}[{', '.join(rendered)}]{CALL_END}"


def _python_literal(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_python_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_python_literal(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)  # strings double-quoted, numbers as JSON writes them
