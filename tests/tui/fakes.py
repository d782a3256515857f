"""A scripted Conversation and a Console writing to a string, for the chat's tests without a model."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from lfmserve.results import ChatResult, ContentDelta, FinalMessage, StreamEvent, Timings, Usage
from lfmserve.tui.conversation import Reply

USAGE = Usage(prompt_tokens=10, completion_tokens=3, cached_tokens=4)
TIMINGS = Timings(cache_n=4, prompt_n=6, prompt_ms=10.0, predicted_n=3, predicted_ms=30.0)


def final(content: str | None = "Hello there.", **fields: Any) -> FinalMessage:
    values: dict[str, Any] = {"reasoning": None, "tool_calls": (), "finish_reason": "stop"}
    values.update(usage=USAGE, timings=TIMINGS)
    values.update(fields)
    return FinalMessage(ChatResult(content=content, **values))


class FakeConversation:
    """Replies with the scripted events (or raises the scripted error after them), and records each call."""

    def __init__(self, events: Sequence[StreamEvent] = (ContentDelta("Hello there."), final())) -> None:
        self.events: list[StreamEvent] = list(events)
        self.error: Exception | None = None
        self.sent: list[tuple[str, list[Path], list[Path]]] = []
        self.closed_early = False
        self.system: str | None = None
        self._messages: list[dict[str, Any]] = []

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self._messages

    def reply(self, text: str, *, images: Sequence[Path] = (), audio: Sequence[Path] = ()) -> Reply:
        self.sent.append((text, list(images), list(audio)))
        self._messages.append({"role": "user", "content": text})
        try:
            yield from self.events
        except GeneratorExit:
            self.closed_early = True
            raise
        if self.error is not None:
            raise self.error
        self._messages.append({"role": "assistant", "content": "Hello there."})

    def reset(self, system: str | None) -> None:
        self.system = system
        self._messages = [{"role": "system", "content": system}] if system else []

    def close(self) -> None:
        pass


def string_console() -> tuple[Console, io.StringIO]:
    """A plain (not a terminal) console: what it prints is the text, with no control codes."""
    out = io.StringIO()
    return Console(file=out, width=80, force_terminal=False, color_system=None, highlight=False), out
