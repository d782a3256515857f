"""The reasoning budget's tracker: which generated tokens are thinking, and the tokens it writes by force once the
budget is spent (the message, then the end of the thinking), token by token."""

from __future__ import annotations

from lfmserve.engine.records import ReasoningControl, ThinkingBudget
from lfmserve.engine.thinking import ThinkingTracker

START, END, MESSAGE = (5,), (6,), (7, 8)


def _run(tracker: ThinkingTracker, sampled: list[int]) -> list[tuple[int, bool]]:
    """Each step's token and whether it was forced: a forced token replaces the next sampled one."""
    out, pending = [], list(sampled)
    while pending or tracker.forced_token() is not None:
        forced = tracker.forced_token()
        token = forced if forced is not None else pending.pop(0)
        tracker.accept(token)
        out.append((token, forced is not None))
        if forced is None and not pending:
            break
    return out


def test_the_budget_ends_thinking_with_the_message_then_the_end() -> None:
    tracker = ThinkingTracker(ThinkingBudget(2, START, END, MESSAGE))
    steps = _run(tracker, [1, 5, 10, 11, 12, 13])
    assert steps == [
        (1, False), (5, False), (10, False), (11, False), (7, True), (8, True), (6, True), (12, False), (13, False),
    ]  # fmt: skip
    assert tracker.forced_token() is None


def test_thinking_that_ends_by_itself_is_left_alone_and_a_new_block_has_a_new_budget() -> None:
    tracker = ThinkingTracker(ThinkingBudget(2, START, END))
    assert _run(tracker, [5, 10, 6, 20, 21, 5, 30, 31, 32]) == [
        (5, False), (10, False), (6, False), (20, False), (21, False),
        (5, False), (30, False), (31, False), (6, True), (32, False),
    ]  # fmt: skip


def test_budget_zero_ends_thinking_at_once_also_when_the_prompt_opened_it() -> None:
    tracker = ThinkingTracker(ThinkingBudget(0, START, END, starts_inside=True))
    assert tracker.forced_token() == 6
    assert _run(tracker, [40, 41]) == [(6, True), (40, False), (41, False)]
    always = ThinkingTracker(ThinkingBudget(0, START, END))  # a model that opens thinking itself
    assert _run(always, [5, 40]) == [(5, False), (6, True), (40, False)]


def test_tags_of_several_tokens_are_matched_whole() -> None:
    tracker = ThinkingTracker(ThinkingBudget(1, (5, 9), (6, 9)))
    assert _run(tracker, [5, 1, 5, 9, 10, 11]) == [
        (5, False), (1, False), (5, False), (9, False), (10, False), (6, True), (9, True), (11, False),
    ]  # fmt: skip
    assert ThinkingTracker.of(None) is None


def _step(tracker: ThinkingTracker, sampled: int) -> tuple[int, bool]:
    forced = tracker.forced_token()
    token = forced if forced is not None else sampled
    tracker.accept(token)
    return token, forced is not None


def test_an_end_asked_while_thinking_forces_the_end_at_the_next_step_and_the_answer_follows() -> None:
    control = ReasoningControl()
    tracker = ThinkingTracker(ThinkingBudget(2**31 - 1, START, END, MESSAGE, starts_inside=True, control=control))
    assert [_step(tracker, token) for token in (10, 11)] == [(10, False), (11, False)]
    control.end()
    assert [_step(tracker, token) for token in (12, 13, 14, 15)] == [(7, True), (8, True), (6, True), (15, False)]
    control.end()  # not thinking now: dropped, not kept for the next block
    assert [_step(tracker, token) for token in (16, 5, 17, 18)] == [(16, False), (5, False), (17, False), (18, False)]
    assert not control.take()


def test_an_end_asked_before_the_thinking_opens_is_dropped() -> None:
    control = ReasoningControl()
    tracker = ThinkingTracker(ThinkingBudget(2**31 - 1, START, END, control=control))
    control.end()
    assert [_step(tracker, token) for token in (1, 5, 10, 11)] == [(1, False), (5, False), (10, False), (11, False)]
