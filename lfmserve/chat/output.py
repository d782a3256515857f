"""Splitting generated text into reasoning, content and tool calls, incrementally.

The same parser serves whole responses and streams: a whole message is the stream fed at once, so
both always agree. Text that might be the start of a marker (``<thi``, ``<|tool_ca``) is held back
until the next piece decides it, so markup never leaks into ``content``.

- Reasoning: ``<think>…</think>`` (at the start or later) goes to ``reasoning``; whitespace right
  after ``<think>``, before ``</think>`` and right after ``</think>`` is dropped. A think block cut
  off by the token limit is all reasoning.
- Tool calls: in a ``<|tool_call_start|>…<|tool_call_end|>`` block, each call is parsed with
  :func:`~lfmserve.tool_calls.parse_call_block` and handed on as soon as its brackets close
  (:mod:`~lfmserve.chat.call_list`). A closed block none of whose calls parse comes back as content,
  markers included; in a block that gave calls, the items that are no calls come back as text. A block the
  token limit cut keeps the calls written before the cut; its unfinished tail is dropped.

Example::

    parser = AssistantOutputParser(split_reasoning=True, parse_tool_calls=True)
    for piece in pieces:
        for delta in parser.feed(piece):
            ...
    deltas = parser.finish()
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from .call_list import CallListScanner
from .tool_calls import CALL_END, CALL_START, ParsedCall, parse_call_block

THINK_START = "<think>"
THINK_END = "</think>"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A parsed call with its OpenAI id and position among the message's calls."""

    index: int
    id: str
    name: str
    arguments: str  # JSON text

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def arguments_object(self) -> Any:
        """The arguments parsed, for APIs that send them as an object; ones that do not parse are ``{}``, as in
        llama-server."""
        try:
            return json.loads(self.arguments)
        except json.JSONDecodeError:
            return {}


@dataclass(frozen=True, slots=True)
class OutputDelta:
    """One piece of the message: exactly one field is set."""

    content: str = ""
    reasoning: str = ""
    call: ToolCall | None = None


@dataclass(slots=True)
class AssistantMessage:
    content: str = ""
    reasoning: str = ""
    calls: list[ToolCall] = field(default_factory=list)

    def add(self, delta: OutputDelta) -> None:
        self.content += delta.content
        self.reasoning += delta.reasoning
        if delta.call is not None:
            self.calls.append(delta.call)


def finish_reason(engine_reason: str, has_calls: bool) -> str:
    """OpenAI's ``tool_calls`` when the answer ended by itself with calls (cut off, it stays ``length``)."""
    return "tool_calls" if has_calls and engine_reason == "stop" else engine_reason


def call_id() -> str:
    return "call_" + secrets.token_urlsafe(18).replace("-", "a").replace("_", "b")


def _partial_marker(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that is a proper beginning of ``marker``."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0


class _ReasoningSplitter:
    """``<think>`` blocks to reasoning, the rest to content, trimming the whitespace around the tags."""

    def __init__(self, *, in_reasoning: bool) -> None:
        self._in_reasoning = in_reasoning
        self._buffer = ""
        self._segment_start = in_reasoning  # drop leading whitespace of this segment (not of the answer's start)
        self._held_space = ""  # reasoning's trailing whitespace, dropped if </think> follows

    def feed(self, text: str) -> list[OutputDelta]:
        self._buffer += text
        out: list[OutputDelta] = []
        while True:
            marker = THINK_END if self._in_reasoning else THINK_START
            at = self._buffer.find(marker)
            if at < 0:
                keep = _partial_marker(self._buffer, marker)
                self._emit(self._buffer[: len(self._buffer) - keep], out)
                self._buffer = self._buffer[len(self._buffer) - keep :]
                return out
            self._emit(self._buffer[:at], out)
            self._buffer = self._buffer[at + len(marker) :]
            self._in_reasoning = not self._in_reasoning
            self._segment_start, self._held_space = True, ""

    def finish(self) -> list[OutputDelta]:
        out: list[OutputDelta] = []
        self._emit(self._buffer, out)
        self._buffer = ""
        return out

    def _emit(self, text: str, out: list[OutputDelta]) -> None:
        if self._segment_start:
            text = text.lstrip()
            if not text:
                return
            self._segment_start = False
        if not self._in_reasoning:
            if text:
                out.append(OutputDelta(content=text))
            return
        text = self._held_space + text
        body = text.rstrip()
        self._held_space = text[len(body) :]
        if body:
            out.append(OutputDelta(reasoning=body))


class _ToolCallSplitter:
    """Call blocks out of the content. Each call is handed on as soon as it is whole; a closed block none of whose
    calls parse is content, markers included; a block the token limit cut keeps the calls written before the cut,
    and its unfinished tail is dropped (no marker reaches the content)."""

    def __init__(self, tool_names: frozenset[str] = frozenset()) -> None:
        self._buffer = ""
        self._in_call = False
        self._n_calls = 0
        #: The tools' names, and whether the answer's start could still be a call list without markers.
        self._names = tool_names
        self._at_start = bool(tool_names)
        self._markers = True
        self._block = ""
        self._scanner = CallListScanner()
        self._emitted = 0
        #: Items of the open block that are not calls (given back as text when the block closes).
        self._unparsed: list[str] = []

    def feed(self, text: str) -> list[OutputDelta]:
        self._buffer += text
        out: list[OutputDelta] = []
        while True:
            if self._in_call and not self._markers:
                out += self._grow(self._buffer)
                self._buffer = ""
                if not self._scanner.closed:
                    return out
                self._buffer, self._block = self._block[self._scanner.end :], self._block[: self._scanner.end]
                self._in_call = False
                out += self._close()
                continue
            if self._in_call:
                at = self._buffer.find(CALL_END)
                if at < 0:
                    keep = _partial_marker(self._buffer, CALL_END)
                    out += self._grow(self._buffer[: len(self._buffer) - keep])
                    self._buffer = self._buffer[len(self._buffer) - keep :]
                    return out
                out += self._grow(self._buffer[:at])
                self._buffer = self._buffer[at + len(CALL_END) :]
                self._in_call = False
                out += self._close()
                continue
            if self._at_start:
                starts_list = _starts_call_list(self._buffer, self._names)
                if starts_list is None:
                    return out  # too little text yet to tell
                self._at_start = False
                if starts_list:
                    self._buffer = self._buffer.lstrip()
                    self._open(markers=False)
                    continue
            at = self._buffer.find(CALL_START)
            if at < 0:
                keep = _partial_marker(self._buffer, CALL_START)
                if len(self._buffer) > keep:
                    out.append(OutputDelta(content=self._buffer[: len(self._buffer) - keep]))
                self._buffer = self._buffer[len(self._buffer) - keep :]
                return out
            if at:
                out.append(OutputDelta(content=self._buffer[:at]))
            self._buffer = self._buffer[at + len(CALL_START) :]
            self._open()

    def finish(self) -> list[OutputDelta]:
        """The end of the answer: text held back is content; an open block was cut, and only its calls count."""
        text = "" if self._in_call else self._buffer
        self._buffer, self._in_call = "", False
        return [OutputDelta(content=text)] if text else []

    def _open(self, *, markers: bool = True) -> None:
        self._in_call, self._markers = True, markers
        self._block, self._scanner, self._emitted, self._unparsed = "", CallListScanner(), 0, []

    def _grow(self, text: str) -> list[OutputDelta]:
        """More of the open block: the calls it completes."""
        if not text:
            return []
        self._block += text
        out: list[OutputDelta] = []
        for item in self._scanner.feed(text):
            calls = parse_call_block(item)
            if calls is None or len(calls) != 1 or self._unparsed:
                self._unparsed.append(item)
            else:
                self._emitted += 1
                out.append(OutputDelta(call=self._numbered(calls[0])))
        return out

    def _close(self) -> list[OutputDelta]:
        """The block's end: a block that gave no call is parsed whole (or is content, markers included); one that
        gave calls gives back the items that were no calls as text."""
        if not self._emitted:
            calls = parse_call_block(self._block)
            if calls is None:
                text = CALL_START + self._block + CALL_END if self._markers else self._block
                return [OutputDelta(content=text)]
            return [OutputDelta(call=self._numbered(call)) for call in calls]
        return [OutputDelta(content=", ".join(self._unparsed))] if self._unparsed else []

    def _numbered(self, call: ParsedCall) -> ToolCall:
        self._n_calls += 1
        return ToolCall(self._n_calls - 1, call_id(), call.name, call.arguments_json())


def _starts_call_list(text: str, names: frozenset[str]) -> bool | None:
    """Whether the answer starts with a call list written without its markers (``[get_weather(``, a tool's name
    after the bracket), as LFM models may when their template lists the tools without list tokens; None while
    the text so far could still become one."""
    head = text.lstrip()
    if not head:
        return None
    if head[0] != "[":
        return False
    rest = head[1:].lstrip()
    if any(rest.startswith(name + "(") for name in names):
        return True
    return None if any((name + "(").startswith(rest) for name in names) else False


class AssistantOutputParser:
    """Reasoning split first, then tool calls out of the content; either stage may be off."""

    def __init__(
        self,
        *,
        split_reasoning: bool,
        parse_tool_calls: bool,
        tool_names: frozenset[str] = frozenset(),
        starts_in_reasoning: bool = False,
    ) -> None:
        self._reasoning = _ReasoningSplitter(in_reasoning=starts_in_reasoning) if split_reasoning else None
        self._calls = _ToolCallSplitter(tool_names) if parse_tool_calls else None

    def feed(self, text: str) -> list[OutputDelta]:
        if self._reasoning is None:
            return self._route([OutputDelta(content=text)] if text else [])
        return self._route(self._reasoning.feed(text))

    def finish(self) -> list[OutputDelta]:
        deltas = self._route(self._reasoning.finish()) if self._reasoning is not None else []
        if self._calls is not None:
            deltas += self._calls.finish()
        return deltas

    def _route(self, deltas: list[OutputDelta]) -> list[OutputDelta]:
        if self._calls is None:
            return deltas
        out: list[OutputDelta] = []
        for delta in deltas:
            out += self._calls.feed(delta.content) if delta.content else [delta]
        return out

    def parse(self, text: str) -> AssistantMessage:
        """A whole message at once (the parser is used up)."""
        message = AssistantMessage()
        for delta in self.feed(text) + self.finish():
            message.add(delta)
        return message
