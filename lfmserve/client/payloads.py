"""Request bodies and typed results: what every chat-family method sends and how its answer is read.

Pure functions, no I/O, shared by :class:`~lfmserve.client.Client` and its async twin. Field names are the
OpenAI / llama-server ones: ``reasoning_content`` (llama-server's ``--reasoning-format``; older builds say
``thinking``), ``timings``, ``usage.prompt_tokens_details.cached_tokens``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest, LfmError
from ..results import ChatResult, Timings, ToolCall, Usage, parse_content, wire_format
from .media import AudioInput, ImageInput, audio_part, image_part


@dataclass(frozen=True, slots=True)
class ChatBody:
    """A chat request body, and the pydantic class its content is parsed into (None: no parsing)."""

    json: dict[str, Any]
    parse_as: Any = None


def chat_body(
    messages: Sequence[Mapping[str, Any]],
    *,
    model: str | None,
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: str | Mapping[str, Any] | None,
    response_format: Any,
    thinking: bool | None,
    images: Sequence[ImageInput],
    audio: Sequence[AudioInput],
    stream: bool,
    sampling: Mapping[str, Any],
) -> ChatBody:
    """The ``/v1/chat/completions`` body; ``images`` and ``audio`` join the last user message, after its text."""
    body: dict[str, Any] = {"messages": _with_media(messages, images, audio)}
    if model is not None:
        body["model"] = model
    if tools:
        body["tools"] = list(tools)
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    wire, parse_as = wire_format(response_format)
    if wire is not None:
        body["response_format"] = wire
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(sampling)
    if thinking is not None:
        body["chat_template_kwargs"] = {**body.get("chat_template_kwargs", {}), "enable_thinking": thinking}
    return ChatBody(body, parse_as)


def _with_media(
    messages: Sequence[Mapping[str, Any]], images: Sequence[ImageInput], audio: Sequence[AudioInput]
) -> list[dict[str, Any]]:
    out = [dict(message) for message in messages]
    if not images and not audio:
        return out
    users = [i for i, message in enumerate(out) if message.get("role") == "user"]
    if not users:
        raise InvalidRequest("images and audio join the last user message, and there is none", param="messages")
    last = out[users[-1]]
    content = last.get("content")
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    last["content"] = [*parts, *(image_part(image) for image in images), *(audio_part(clip) for clip in audio)]
    return out


def chat_result(answer: Mapping[str, Any], parse_as: Any = None) -> ChatResult:
    """The typed reply from a whole (non-streamed) chat completion."""
    choices = answer.get("choices") or []
    if not choices:
        raise LfmError(f"the chat answer has no choices: {json.dumps(answer)[:300]}")
    choice = choices[0]
    message = choice.get("message") or {}
    calls = tool_calls(
        [
            (
                call.get("id") or "",
                (call.get("function") or {}).get("name") or "",
                (call.get("function") or {}).get("arguments"),
            )
            for call in message.get("tool_calls") or []
        ],
        choice.get("finish_reason"),
    )
    return assembled(
        content=message.get("content"),
        reasoning=message.get("reasoning_content") or message.get("thinking"),
        tool_calls=calls,
        finish_reason=choice.get("finish_reason"),
        usage=usage(answer.get("usage")),
        timings=timings(answer.get("timings")),
        parse_as=parse_as,
    )


def assembled(
    *,
    content: str | None,
    reasoning: str | None,
    tool_calls: tuple[ToolCall, ...],
    finish_reason: str | None,
    usage: Usage | None,
    timings: Timings | None,
    parse_as: Any,
) -> ChatResult:
    """A :class:`ChatResult`, with the content parsed into ``parse_as`` (pydantic) when asked."""
    finish_reason = finish_reason or ("tool_calls" if tool_calls else "stop")
    return ChatResult(
        content=content,
        reasoning=reasoning or None,
        tool_calls=tool_calls,
        finish_reason=finish_reason,
        usage=usage,
        timings=timings,
        parsed=parse_content(parse_as, content, finish_reason),
    )


def tool_calls(raw: list[tuple[str, str, Any]], finish_reason: str | None) -> tuple[ToolCall, ...]:
    """The calls, each with its arguments parsed. An answer cut off at ``max_tokens`` (``length``) can end inside
    its last call's arguments: that call is incomplete and left out (the finish reason says why), as a cut-off
    answer's ``parsed`` is None, rather than raised as not JSON."""
    calls = [tool_call(*call) for call in raw[:-1]]
    try:
        calls.extend(tool_call(*call) for call in raw[-1:])
    except LfmError:
        if finish_reason != "length":
            raise
    return tuple(calls)


def tool_call(call_id: str, name: str, arguments: Any) -> ToolCall:
    """A call with its arguments as a dict: servers send a JSON string (some a dict already)."""
    if isinstance(arguments, Mapping):
        return ToolCall(call_id, name, dict(arguments))
    try:
        parsed = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        raise LfmError(f"tool call {name!r}: the arguments are not JSON: {str(arguments)[:200]!r}") from exc
    if not isinstance(parsed, dict):
        raise LfmError(f"tool call {name!r}: the arguments are not a JSON object: {str(arguments)[:200]!r}")
    return ToolCall(call_id, name, parsed)


def usage(value: Any) -> Usage | None:
    if not isinstance(value, Mapping):
        return None
    details = value.get("prompt_tokens_details") or {}
    return Usage(
        prompt_tokens=int(value.get("prompt_tokens") or 0),
        completion_tokens=int(value.get("completion_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
    )


def timings(value: Any) -> Timings | None:
    if not isinstance(value, Mapping):
        return None
    return Timings(
        cache_n=int(value.get("cache_n") or 0),
        prompt_n=int(value.get("prompt_n") or 0),
        prompt_ms=float(value.get("prompt_ms") or 0.0),
        predicted_n=int(value.get("predicted_n") or 0),
        predicted_ms=float(value.get("predicted_ms") or 0.0),
        draft_n=int(value.get("draft_n") or 0),
        draft_n_accepted=int(value.get("draft_n_accepted") or 0),
    )
