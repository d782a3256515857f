"""One reply on the terminal: its stream events drawn with rich as they arrive.

Reasoning streams dimmed in a live region that holds only its last lines, and collapses into a one-line
summary once the visible reply (or a tool call, or the end) comes: a long think would otherwise push the
answer off the screen. Tool calls show their name and arguments; the final event adds a stats line.

Example::

    view = ReplyView(console)
    try:
        for event in conversation.reply("hi"):
            view.show(event)
    finally:
        view.close()
"""

from __future__ import annotations

import json

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.segment import Segment
from rich.text import Text

from ..results import ChatResult, ContentDelta, FinalMessage, ReasoningDelta, Stats, StreamEvent, ToolCallDelta

REASONING_STYLE = "dim"
TOOL_STYLE = "cyan"


#: C0 controls but newline and tab, DEL and the C1 controls -> their visible pictures (U+2400...) or U+FFFD:
#: a model's ESC must not reach the terminal as an escape sequence.
_CONTROLS = {
    **{code: 0x2400 + code for code in range(0x20) if chr(code) not in "\n\t"},
    0x7F: 0x2421,
    **dict.fromkeys(range(0x80, 0xA0), 0xFFFD),
}


def printable(text: str) -> str:
    """Model text safe to write to a terminal: control characters shown, not obeyed."""
    return text.translate(_CONTROLS)


def reasoning_summary(reasoning: str) -> str:
    """The line a finished think collapses to."""
    n_words = len(reasoning.split())
    return f"thinking ({n_words} word{'' if n_words == 1 else 's'}), /think to show"


def stats_line(result: ChatResult) -> str:
    """Tokens generated, their speed and the prompt tokens the server's cache already held."""
    usage, timings = result.usage, result.timings
    n_tokens = usage.completion_tokens if usage else timings.predicted_n if timings else 0
    n_cached = usage.cached_tokens if usage else timings.cache_n if timings else 0
    parts = [f"{n_tokens} tokens"]
    if timings is not None:
        parts.append(f"{timings.predicted_per_second:.1f} tok/s")
    parts.append(f"{n_cached} cached")
    if result.finish_reason == "length":
        parts.append("cut at max tokens")
    return ", ".join(parts)


class _Tail:
    """The last lines of ``text`` that fit the screen: rich's Live cannot scroll, so a think longer than the
    terminal would otherwise be cut at the bottom, hiding what is being written."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        n_lines = max(1, console.size.height - 2)
        recent = self.text[-n_lines * max(1, options.max_width) :]  # bounds the work on a long think
        lines = console.render_lines(Text(printable(recent), style=REASONING_STYLE), options, pad=False)
        for line in lines[-n_lines:]:
            yield from line
            yield Segment.line()


class ReplyView:
    """Draws one reply's events; :attr:`reasoning` keeps its think for ``/think``."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.reasoning = ""
        self.result: ChatResult | None = None
        self._live: Live | None = None
        self._tool_index: int | None = None
        self._at_line_start = True

    def show(self, event: StreamEvent) -> None:
        if isinstance(event, ReasoningDelta):
            self._think(event.text)
        elif isinstance(event, ContentDelta):
            self._collapse()
            self._write(event.text)
        elif isinstance(event, ToolCallDelta):
            self._collapse()
            self._tool_call(event)
        elif isinstance(event, FinalMessage):
            self._final(event.result)
        else:
            assert isinstance(event, Stats)  # running counts: the final event's are the ones shown

    def stopped(self, why: str) -> None:
        """The reply ended early (Ctrl-C, an error): end its line and say so."""
        self.close()
        self.console.print(Text(why, style="yellow"))

    def close(self) -> None:
        """Collapse a think still streaming and end the reply's line, so the prompt starts on its own."""
        self._collapse()
        self._end_line()

    def _think(self, text: str) -> None:
        self.reasoning += text
        if self._live is None:
            self._end_line()
            self._live = Live(console=self.console, auto_refresh=False, transient=True)
            self._live.start()
        self._live.update(_Tail(self.reasoning), refresh=True)

    def _collapse(self) -> None:
        if self._live is None:
            return
        self._live.stop()
        self._live = None
        self.console.print(Text(reasoning_summary(self.reasoning), style=REASONING_STYLE))

    def _tool_call(self, delta: ToolCallDelta) -> None:
        if delta.index != self._tool_index:
            self._tool_index = delta.index
            self._end_line()
            self._write(f"tool call {delta.name or '?'} ", style=TOOL_STYLE)
        self._write(delta.arguments, style=TOOL_STYLE)

    def _final(self, result: ChatResult) -> None:
        self.result = result
        self.reasoning = result.reasoning or self.reasoning
        self._collapse()
        if self._tool_index is None:  # calls that arrived whole, with no deltas before them
            for call in result.tool_calls:
                self._end_line()
                self._write(f"tool call {call.name} {json.dumps(call.arguments, ensure_ascii=False)}", style=TOOL_STYLE)
        self._end_line()
        self.console.print(Text(stats_line(result), style="dim"))

    def _write(self, text: str, style: str | None = None) -> None:
        if text:
            shown = Text(printable(text), style=style or "")  # a Text: no markup or emoji codes parsed
            self.console.print(shown, end="", soft_wrap=True)
            self._at_line_start = text.endswith("\n")

    def _end_line(self) -> None:
        if not self._at_line_start:
            self.console.print()
            self._at_line_start = True
