"""ReplyView: content streams as it comes, reasoning collapses into a summary, tool calls and stats show."""

from __future__ import annotations

import io

from rich.console import Console

from lfmserve.results import ContentDelta, ReasoningDelta, Stats, ToolCall, ToolCallDelta
from lfmserve.tui.view import ReplyView, reasoning_summary, stats_line
from tests.tui.fakes import TIMINGS, final, string_console


def test_content_then_the_stats_line() -> None:
    console, out = string_console()
    view = ReplyView(console)
    for event in (ContentDelta("Hello"), Stats(None, TIMINGS), ContentDelta(" there."), final()):
        view.show(event)
    assert out.getvalue() == "Hello there.\n3 tokens, 100.0 tok/s, 4 cached\n"


def test_reasoning_collapses_to_one_line_and_is_kept() -> None:
    console, out = string_console()
    view = ReplyView(console)
    for event in (ReasoningDelta("Let me "), ReasoningDelta("think a bit."), ContentDelta("Yes."), final("Yes.")):
        view.show(event)
    assert out.getvalue().splitlines() == [reasoning_summary("Let me think a bit."), "Yes.", stats_line(final().result)]
    assert reasoning_summary("Let me think a bit.") == "thinking (5 words), /think to show"
    assert view.reasoning == "Let me think a bit."


def test_reasoning_streams_dimmed_on_a_terminal_and_is_erased() -> None:
    out = io.StringIO()
    console = Console(file=out, width=40, height=10, force_terminal=True, color_system="standard")
    view = ReplyView(console)
    view.show(ReasoningDelta("pondering"))
    assert "\x1b[2mpondering" in out.getvalue()  # SGR 2: dim
    view.show(ContentDelta("Done."))
    shown = out.getvalue()
    assert "\x1b[2K" in shown  # the live region is cleared before the summary
    assert shown.endswith("thinking (1 word), /think to show\x1b[0m\nDone.")


def test_tool_calls_show_name_and_arguments() -> None:
    console, out = string_console()
    view = ReplyView(console)
    events = [
        ToolCallDelta(0, "call_1", "get_weather", '{"city": '),
        ToolCallDelta(0, None, None, '"Paris"}'),
        ToolCallDelta(1, "call_2", "get_time", "{}"),
    ]
    for event in events:
        view.show(event)
    calls = (ToolCall("call_1", "get_weather", {"city": "Paris"}), ToolCall("call_2", "get_time", {}))
    view.show(final(None, tool_calls=calls, finish_reason="tool_calls"))
    lines = out.getvalue().splitlines()
    assert lines[:2] == ['tool call get_weather {"city": "Paris"}', "tool call get_time {}"]


def test_whole_tool_calls_in_the_final_event_are_shown() -> None:
    console, out = string_console()
    view = ReplyView(console)
    view.show(final(None, tool_calls=(ToolCall("c", "f", {"x": 1}),), finish_reason="tool_calls"))
    assert out.getvalue().splitlines()[0] == 'tool call f {"x": 1}'


def test_stopped_ends_the_line() -> None:
    console, out = string_console()
    view = ReplyView(console)
    view.show(ReasoningDelta("hmm"))
    view.show(ContentDelta("Partial"))
    view.stopped("stopped")
    assert out.getvalue().splitlines()[1:] == ["Partial", "stopped"]


def test_stats_line_says_when_max_tokens_cut_the_reply() -> None:
    assert stats_line(final(finish_reason="length").result).endswith("cut at max tokens")
    assert stats_line(final(usage=None, timings=None).result) == "0 tokens, 0 cached"
    assert stats_line(final(usage=None).result) == "3 tokens, 100.0 tok/s, 4 cached"  # timings alone will do


def test_control_characters_are_shown_not_obeyed() -> None:
    console, out = string_console()
    view = ReplyView(console)
    view.show(ContentDelta("a\x1b[2Jb\x07\tc\n\x9bd\x7f"))
    view.close()
    assert out.getvalue() == "a\u241b[2Jb\u2407 c\n\ufffdd\u2421\n"  # rich expands the tab to the next stop
