"""A Lark grammar (llguidance's dialect) for LFM tool calls whose arguments follow the tools' schemas.

The grammar writes calls the way the models do: ``<|tool_call_start|>[name(key=value, ...)]<|tool_call_end|>``
with keyword arguments in the order the schema declares them, every required one present and the
optional ones optional. Values are JSON (a JSON string or number is also a Python literal) compiled by
llguidance's ``%json`` from the property's own schema, so string lengths, patterns, enums and numeric
ranges hold; booleans and null are written ``True``/``False``/``None`` as the models write them.
The parser reads both spellings. With an ``answer`` schema (tools beside a response format), the output is
either the call block or JSON that follows the schema.

Example::

    tool_call_grammar([{"type": "function", "function": {"name": "f", "parameters": {...}}}],
                      only=None, parallel=True, markers_are_tokens=True)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..engine.constraints import json_rule
from ..errors import InvalidRequest
from .tool_calls import CALL_END, CALL_START, python_spellable


def tool_call_grammar(
    tools: Sequence[Mapping[str, Any]],
    *,
    only: str | None,
    parallel: bool,
    markers_are_tokens: bool,
    answer: dict[str, Any] | None = None,
) -> str:
    """One call block: calls to the declared tools (or only to ``only``), several if ``parallel``; or, given an
    ``answer`` schema (checked: :func:`~lfmserve.engine.constraints.checked_schema`), JSON that follows it."""
    functions = [t["function"] for t in tools if only is None or t["function"]["name"] == only]
    rules: list[str] = []
    pythonic = all(python_spellable(f["name"], _parameters(f).get("properties") or {}) for f in functions)
    call_rule = _call_rule if pythonic else _json_call_rule
    alternatives = [call_rule(i, f, rules) for i, f in enumerate(functions)]
    start, end = (CALL_START, CALL_END) if markers_are_tokens else (json.dumps(CALL_START), json.dumps(CALL_END))
    calls = 'call (", " call)*' if parallel else "call"
    block = f'{start} "[" {calls} "]" {end}'
    head = [f"start: {block}" if answer is None else f"start: ({block}) | answer", "call: " + " | ".join(alternatives)]
    if answer is not None:
        rules.append(f"answer: {json_rule(answer)}")
    return "\n".join(head + rules) + "\n"


def _parameters(function: Mapping[str, Any]) -> dict[str, Any]:
    schema = function.get("parameters") or {"type": "object", "properties": {}}
    if schema.get("type", "object") != "object" or not isinstance(schema.get("properties") or {}, dict):
        raise InvalidRequest(
            f"tool '{function['name']}': parameters must be a JSON schema of type object with properties",
            param="tools",
        )
    return dict(schema)


def _json_call_rule(index: int, function: Mapping[str, Any], rules: list[str]) -> str:
    """``{"name": "f", "arguments": {...}}``: for names Python syntax cannot spell."""
    rules.append(f"a{index}: {_value(_parameters(function), {})}")
    opening = json.dumps(f'{{"name": {json.dumps(function["name"])}, "arguments": ')
    return f'{opening} a{index} "}}"'


def _call_rule(index: int, function: Mapping[str, Any], rules: list[str]) -> str:
    name = function["name"]
    schema = _parameters(function)
    properties = schema.get("properties") or {}
    definitions: dict[str, Any] = {key: schema[key] for key in ("$defs", "definitions") if key in schema}
    required = set(schema.get("required") or ())
    unknown = required - set(properties)
    if unknown:
        raise InvalidRequest(f"tool '{name}': required parameter {sorted(unknown)[0]!r} is not declared", param="tools")
    items = []
    for k, (key, subschema) in enumerate(properties.items()):
        value_rule = f"v{index}_{k}"
        rules.append(f"{value_rule}: {_value(subschema, definitions)}")
        items.append((f"{json.dumps(key + '=')} {value_rule}", key in required))
    # Each required argument must appear, each optional one may; separators only between present ones.
    tails = [""] * (len(items) + 1)
    for k in range(len(items) - 1, -1, -1):
        item, is_required = items[k]
        step = f'", " {item}' if is_required else f'(", " {item})?'
        tails[k] = f"{step} {tails[k + 1]}".strip()
    starts = []
    for k, (item, is_required) in enumerate(items):
        starts.append(f"{item} {tails[k + 1]}".strip())
        if is_required:
            break
    body = " | ".join(f"({s})" for s in starts)
    if body and not required:
        body = f"({body})?"
    return f"{json.dumps(name + '(')} {body} {json.dumps(')')}".replace("  ", " ")


def _value(schema: Any, definitions: Mapping[str, Any]) -> str:
    if isinstance(schema, dict) and set(schema) <= {"type", "description", "title"}:
        if schema.get("type") == "boolean":
            return '"True" | "False"'
        if schema.get("type") == "null":
            return '"None"'
    return json_rule({**schema, **definitions} if isinstance(schema, dict) else schema)
