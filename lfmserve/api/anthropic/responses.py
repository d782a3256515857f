"""Anthropic's Message object and its stream events, shaped as llama-server writes them.

The content is a ``thinking`` block (with an empty ``signature``: a local model cannot sign), a ``text``
block, then one ``tool_use`` block per call. A stream is ``message_start``; per block a
``content_block_start``, its deltas (``thinking_delta``, ``text_delta``, ``input_json_delta``) and, once
the generation ends, a ``signature_delta`` for the thinking block and every ``content_block_stop`` in
index order; then ``message_delta`` (stop reason, output tokens) and ``message_stop``. No ``timings``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from ...chat.output import AssistantOutputParser, OutputDelta, ToolCall
from ...chat.serving import Collected, Serving
from ...engine.records import EngineOutput
from ..openai.responses import completion_id

BlockKind = Literal["thinking", "text", "tool_use"]


def message(serving: Serving, done: Collected, parser: AssistantOutputParser) -> dict[str, Any]:
    """The whole answer as one Message."""
    out = done.last
    parsed = parser.parse(done.text)
    content: list[dict[str, Any]] = []
    if parsed.reasoning:
        content.append({"type": "thinking", "thinking": parsed.reasoning, "signature": ""})
    if parsed.content:
        content.append({"type": "text", "text": parsed.content})
    content += [{**_tool_use_header(call), "input": call.arguments_object()} for call in parsed.calls]
    return {
        "id": completion_id("chatcmpl-"),
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": serving.model_name,
        "stop_reason": _stop_reason(out, bool(parsed.calls)),
        "stop_sequence": out.stopping_word or None,
        "usage": usage(out),
    }


def usage(out: EngineOutput) -> dict[str, int]:
    """Anthropic counts the cached part of the prompt apart from the rest (llama-server's counts include it)."""
    return {
        "cache_read_input_tokens": out.n_cached_tokens,
        "input_tokens": out.n_prompt_tokens - out.n_cached_tokens,
        "output_tokens": out.n_decoded,
    }


async def message_events(
    serving: Serving, parser: AssistantOutputParser, outputs: AsyncIterator[EngineOutput]
) -> AsyncIterator[dict[str, Any]]:
    """The stream's events; each one's ``type`` is also its SSE ``event:`` name."""
    mid = completion_id("chatcmpl-")
    blocks = _Blocks()
    started = False
    async for out in outputs:
        if not started:  # the prompt's counts come with the first output
            started = True
            yield _message_start(serving, mid, out)
        for delta in parser.feed(out.text) + (parser.finish() if out.finished else []):
            for event in blocks.add(delta):
                yield event
        if out.finished:
            for event in blocks.close():
                yield event
            stop_reason = _stop_reason(out, blocks.has_calls)
            yield {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": out.stopping_word or None},
                "usage": {"output_tokens": out.n_decoded},
            }
            yield {"type": "message_stop"}


def _message_start(serving: Serving, mid: str, out: EngineOutput) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": serving.model_name,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage(out), "output_tokens": 0},
        },
    }


@dataclass(slots=True)
class _Blocks:
    """The blocks a stream has opened, by index; all stay open until the end, as in llama-server (so a thinking
    block that resumes after some text goes on at its own index)."""

    kinds: list[BlockKind] = field(default_factory=list)

    @property
    def has_calls(self) -> bool:
        return "tool_use" in self.kinds

    def add(self, delta: OutputDelta) -> list[dict[str, Any]]:
        """The events for one parsed piece: its block's start the first time, then the piece itself."""
        if delta.call is not None:
            index, start = self._open("tool_use", {**_tool_use_header(delta.call), "input": {}})
            arguments = delta.call.arguments
            piece = {"type": "input_json_delta", "partial_json": arguments} if arguments else None
        elif delta.reasoning:
            index, start = self._open("thinking", {"type": "thinking", "thinking": ""})
            piece = {"type": "thinking_delta", "thinking": delta.reasoning}
        else:
            index, start = self._open("text", {"type": "text", "text": ""})
            piece = {"type": "text_delta", "text": delta.content}
        events = [start] if start else []
        if piece is not None:
            events.append({"type": "content_block_delta", "index": index, "delta": piece})
        return events

    def close(self) -> list[dict[str, Any]]:
        """Every block's stop, in index order; Anthropic's clients expect a signature before a thinking block's."""
        events: list[dict[str, Any]] = []
        for index, kind in enumerate(self.kinds):
            if kind == "thinking":
                signature = {"type": "signature_delta", "signature": ""}
                events.append({"type": "content_block_delta", "index": index, "delta": signature})
            events.append({"type": "content_block_stop", "index": index})
        return events

    def _open(self, kind: BlockKind, block: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        """The block's index, and its start event when it is new (each tool call is a new block)."""
        if kind != "tool_use" and kind in self.kinds:
            return self.kinds.index(kind), None
        self.kinds.append(kind)
        index = len(self.kinds) - 1
        return index, {"type": "content_block_start", "index": index, "content_block": block}


def _tool_use_header(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name}


def _stop_reason(out: EngineOutput, has_calls: bool) -> str:
    """``max_tokens`` when cut off; a matched stop sequence is ``stop_sequence`` (Anthropic's name; llama-server
    says ``end_turn``); an answer that ended by itself with calls is ``tool_use``."""
    if out.finish_reason != "stop":
        return "max_tokens"
    if out.stop_type == "word":
        return "stop_sequence"
    return "tool_use" if has_calls else "end_turn"
