"""``response_format`` as an app gives it, whichever way the model runs: an OpenAI dict, a bare JSON schema, or a
pydantic model class whose instance comes back in :attr:`lfmserve.results.ChatResult.parsed`.

Plain Python with no heavy imports, so that the HTTP client and the in-process :class:`lfmserve.Model` can
share it: pydantic is only reached through the class the caller passes (its ``model_json_schema`` and
``model_validate_json``).

Example::

    wire, parse_as = wire_format(Weather)       # {"type": "json_schema", "json_schema": {...}}, Weather
    schema = output_schema(wire)                 # what the grammar constrains the answer to
    parsed = parse_content(parse_as, '{"city": "Paris"}', "stop")
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import InvalidRequest

#: The ``type`` values of OpenAI's ``response_format``.
FORMAT_TYPES = ("text", "json_object", "json_schema")


def wire_format(value: Any) -> tuple[dict[str, Any] | None, Any]:
    """``response_format`` as OpenAI's dict, and the pydantic class to parse the answer into (None: no parsing).

    A mapping whose ``type`` is not one of :data:`FORMAT_TYPES` is taken for a bare JSON schema.
    """
    if value is None:
        return None, None
    if isinstance(value, type) and hasattr(value, "model_json_schema"):
        schema = value.model_json_schema()
        return {"type": "json_schema", "json_schema": {"name": value.__name__, "schema": schema}}, value
    if isinstance(value, Mapping):
        if value.get("type") in FORMAT_TYPES:
            return dict(value), None
        return {"type": "json_schema", "json_schema": {"name": "response", "schema": dict(value)}}, None
    raise InvalidRequest(
        f"response_format must be a dict or a pydantic model class, not {type(value).__name__}",
        param="response_format",
    )


def output_schema(wire: Mapping[str, Any]) -> dict[str, Any] | bool | None:
    """The JSON schema the answer must follow (None: free text), read from OpenAI's dict as the server reads it:
    ``json_object`` is any object unless llama-server's ``schema`` beside it says more."""
    kind = wire.get("type")
    if kind not in FORMAT_TYPES:
        raise InvalidRequest(
            f"response_format type {kind!r} is not one of {', '.join(FORMAT_TYPES)}", param="response_format.type"
        )
    if kind == "text":
        return None
    spec = wire.get("json_schema") if kind == "json_schema" else wire
    schema = spec.get("schema") if isinstance(spec, Mapping) else None
    if schema is None and kind == "json_object":
        return {"type": "object"}
    if not isinstance(schema, dict | bool):
        raise InvalidRequest(
            "type 'json_schema' needs json_schema.schema, a JSON schema", param="response_format.json_schema.schema"
        )
    return schema


def parse_content(parse_as: Any, content: str | None, finish_reason: str) -> Any:
    """The answer as an instance of ``parse_as`` (a pydantic model class); None without a class, or when the
    answer was cut off (``length``). An answer that does not validate raises pydantic's ``ValidationError``,
    as the OpenAI SDK's ``parse`` does."""
    if parse_as is None or finish_reason == "length":
        return None
    return parse_as.model_validate_json(content or "")
