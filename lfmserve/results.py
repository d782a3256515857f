"""Typed results of a chat turn, shared by the HTTP client and the in-process :class:`lfmserve.Model`.

An app written against these records does not care whether the model runs behind an HTTP server
(:mod:`lfmserve.client`) or in its own process (:mod:`lfmserve.local`): a reply is a :class:`ChatResult`
either way, and a streamed reply is the same sequence of :data:`StreamEvent` records ending in a
:class:`FinalMessage`. Plain data only: importing this module loads neither httpx nor llama.cpp.

The same goes for what an app passes as ``response_format``: an OpenAI dict, a bare JSON schema, or a pydantic
model class whose instance comes back in :attr:`ChatResult.parsed`. Pydantic is reached only through the class
the caller passes (its ``model_json_schema`` and ``model_validate_json``).

Example::

    wire, parse_as = wire_format(Weather)       # {"type": "json_schema", "json_schema": {...}}, Weather
    schema = output_schema(wire)                 # what the grammar constrains the answer to
    parsed = parse_content(parse_as, '{"city": "Paris"}', "stop")
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call the model asked for, with its arguments already parsed from JSON."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one request, as OpenAI's ``usage`` reports them (``cached_tokens`` from its details)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Timings:
    """llama-server's ``timings``: tokens taken from the cache, prefilled and generated, and how fast."""

    cache_n: int
    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    draft_n: int = 0
    draft_n_accepted: int = 0

    @property
    def prompt_per_second(self) -> float:
        return self.prompt_n / self.prompt_ms * 1e3 if self.prompt_ms > 0 else 0.0

    @property
    def predicted_per_second(self) -> float:
        return self.predicted_n / self.predicted_ms * 1e3 if self.predicted_ms > 0 else 0.0


@dataclass(frozen=True, slots=True)
class ChatResult:
    """One assistant reply.

    ``parsed`` holds the pydantic instance when ``response_format`` was a pydantic model class (else None).
    ``finish_reason`` is the server's: ``stop``, ``length`` or ``tool_calls``.
    """

    content: str | None
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    usage: Usage | None = None
    timings: Timings | None = None
    parsed: Any = None

    def message(self) -> dict[str, Any]:
        """The reply as an OpenAI assistant message, ready to append to the history for the next turn."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or ""}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
                }
                for call in self.tool_calls
            ]
        return message


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """More of the visible reply."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """More of the model's thinking (``reasoning_content``), before or between the visible text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """More of tool call number ``index``: its id and name arrive once, its arguments JSON in pieces."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True, slots=True)
class Stats:
    """Running counts: sent with ``timings_per_token`` during the stream, and ``usage`` at its end."""

    usage: Usage | None
    timings: Timings | None


@dataclass(frozen=True, slots=True)
class FinalMessage:
    """The last event of every stream: the whole reply, assembled."""

    result: ChatResult


StreamEvent = ContentDelta | ReasoningDelta | ToolCallDelta | Stats | FinalMessage


@dataclass(frozen=True, slots=True)
class RerankResult:
    """One document's relevance to the query; ``index`` is its position in the request."""

    index: int
    score: float
    document: str


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a served model can do, gathered once from ``/v1/models`` and ``/props``.

    ``ids`` holds the model's id and every alias; ``n_ctx`` is None only when no source states it.
    ``reasoning`` means the chat template has an ``enable_thinking`` switch (llama.cpp does not advertise it).
    """

    model: str
    ids: tuple[str, ...]
    n_ctx: int | None
    vision: bool
    audio: bool
    tools: bool
    reasoning: bool
    embeddings: bool
    sampling_defaults: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ListedModel:
    """One model of ``/v1/models``, as listed (nothing is loaded to learn it): a router lists every model it can
    serve, with ``status`` ``loaded``, ``loading`` or ``unloaded``; a single-model server its one model
    (``status`` None: it serves it)."""

    id: str
    aliases: tuple[str, ...]
    status: str | None
    vision: bool
    audio: bool
    #: ``meta.n_ctx``: what one request may use (a router lists it also for a model not loaded), else ``--ctx-size``
    #: from its arguments.
    n_ctx: int | None


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
    """The answer as an instance of ``parse_as`` (a pydantic model class); None without a class, when the answer
    was cut off (``length``), or when it called tools instead (``tool_calls``: tools beside a response format). An
    answer that does not validate raises pydantic's ``ValidationError``, as the OpenAI SDK's ``parse`` does."""
    if parse_as is None or finish_reason in ("length", "tool_calls"):
        return None
    return parse_as.model_validate_json(content or "")
