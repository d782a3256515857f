"""A streamed chat completion's SSE lines -> typed events, ending with the assembled reply.

One :class:`ChatStreamReader` per stream, fed line by line by the sync and the async client alike. An error
the server sends inside the stream (``data: {"error": ...}``, after the 200 was already written) raises the
same exception class a non-streamed answer would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..results import ContentDelta, FinalMessage, ReasoningDelta, Stats, StreamEvent, Timings, ToolCallDelta, Usage
from .payloads import assembled, timings, tool_calls, usage
from .server_errors import error_from_body


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ChatStreamReader:
    """Example::

    reader = ChatStreamReader(parse_as=None)
    for line in response.iter_lines():
        yield from reader.feed(line)
    yield from reader.finish()
    """

    def __init__(self, parse_as: Any = None) -> None:
        self._parse_as = parse_as
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._finish_reason: str | None = None
        self._usage: Usage | None = None
        self._timings: Timings | None = None
        self.done = False

    def feed(self, line: str) -> list[StreamEvent]:
        """The events in one SSE line (``data: ...``; comments, ``event:`` lines and blank lines carry none)."""
        if not line.startswith("data:") or self.done:
            return []
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return []
        chunk = json.loads(data)
        if isinstance(chunk, dict) and "error" in chunk:
            error = chunk["error"]
            raise error_from_body(int(error.get("code") or 500) if isinstance(error, dict) else 500, chunk)
        return self._chunk(chunk)

    def _chunk(self, chunk: dict[str, Any]) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("thinking")
            if reasoning:
                self._reasoning.append(reasoning)
                events.append(ReasoningDelta(reasoning))
            if delta.get("content"):
                self._content.append(delta["content"])
                events.append(ContentDelta(delta["content"]))
            events.extend(self._tool_call(piece) for piece in delta.get("tool_calls") or [])
            self._finish_reason = choice.get("finish_reason") or self._finish_reason
        chunk_usage, chunk_timings = usage(chunk.get("usage")), timings(chunk.get("timings"))
        if chunk_usage is not None or chunk_timings is not None:
            self._usage = chunk_usage or self._usage
            self._timings = chunk_timings or self._timings
            events.append(Stats(chunk_usage, chunk_timings))
        return events

    def _tool_call(self, piece: dict[str, Any]) -> ToolCallDelta:
        index = int(piece.get("index") or 0)
        partial = self._calls.setdefault(index, _PartialCall())
        function = piece.get("function") or {}
        name = function.get("name")
        arguments = function.get("arguments")
        arguments_text = arguments if isinstance(arguments, str) else json.dumps(arguments) if arguments else ""
        partial.id = piece.get("id") or partial.id
        partial.name = name or partial.name
        partial.arguments.append(arguments_text)
        return ToolCallDelta(index=index, id=piece.get("id"), name=name, arguments=arguments_text)

    def finish(self) -> list[StreamEvent]:
        """The :class:`FinalMessage`: the content, reasoning and tool calls joined, with the last counts."""
        calls = tool_calls(
            [(partial.id, partial.name, "".join(partial.arguments)) for _, partial in sorted(self._calls.items())],
            self._finish_reason,
        )
        content = "".join(self._content)
        result = assembled(
            content=content if content or not calls else None,
            reasoning="".join(self._reasoning),
            tool_calls=calls,
            finish_reason=self._finish_reason,
            usage=self._usage,
            timings=self._timings,
            parse_as=self._parse_as,
        )
        return [FinalMessage(result)]
