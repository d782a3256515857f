"""A tool call's parameters, read as llama-server reads them: a required one missing or of the wrong type is the
client's mistake (400, with nlohmann's message); an optional one missing, null or of another type takes its
default (a number's fraction dropped). A tool's own failure is :class:`ToolFailed`: an answer of
``{"error": ...}`` with status 200, as the model that called the tool should read it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class BadParams(ValueError):
    """A required parameter missing or of the wrong type: a 400."""


class ToolFailed(Exception):
    """What the tool reports instead of a result (``{"error": message}``)."""


_JSON_TYPES = {str: "string", int: "number", bool: "boolean", list: "array", dict: "object"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    for kind, name in ((bool, "boolean"), (int, "number"), (float, "number"), (str, "string"), (list, "array")):
        if isinstance(value, kind):
            return name
    return "object"


def required(params: Mapping[str, Any], name: str, kind: type[T]) -> T:
    if name not in params:
        raise BadParams(f"[json.exception.out_of_range.403] key '{name}' not found")
    value = params[name]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise BadParams(f"[json.exception.type_error.302] type must be {_JSON_TYPES[kind]}, but is {_json_type(value)}")
    return value


def optional_int(params: Mapping[str, Any], name: str, default: int) -> int:
    value = params.get(name)
    return int(value) if isinstance(value, int | float) and math.isfinite(value) else default


def optional_bool(params: Mapping[str, Any], name: str, default: bool) -> bool:
    value = params.get(name)
    return value if isinstance(value, bool) else default


def optional_str(params: Mapping[str, Any], name: str, default: str) -> str:
    value = params.get(name)
    return value if isinstance(value, str) else default
