"""Slot choice and prefix reuse, without a model."""

from lfmserve.engine.scheduler import (
    CachedSequence,
    Checkpoint,
    ReusePlan,
    Shift,
    Slot,
    checkpoint_positions,
    choose_slot,
    common_prefix_length,
    plan_reuse,
    shifted_chunks,
)


def cp(n: int, boundary: bool = False) -> Checkpoint:
    return Checkpoint(n, b"s" * 10, boundary)


def test_common_prefix_length() -> None:
    assert common_prefix_length([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_length([1, 2], [1, 2, 3]) == 2
    assert common_prefix_length([], [1]) == 0


def test_choose_slot_by_similarity_above_the_threshold_else_lru() -> None:
    slots = [Slot(0, tokens=[9, 9], last_used=1.0), Slot(1, tokens=[1, 2, 3], last_used=5.0), Slot(2, last_used=0.5)]
    assert choose_slot(slots, [1, 2, 7, 8], -1, 0.10) is slots[1]  # shares 2/4
    assert choose_slot(slots, [5], -1, 0.10) is slots[2]  # nothing shared: least recently used
    assert choose_slot(slots, [1] + [0] * 19, -1, 0.10) is slots[2]  # shares 1/20 = 0.05: below the threshold
    slots[1].busy = True
    assert choose_slot(slots, [1, 2, 7], -1, 0.10) is slots[2]


def test_a_pinned_slot_waits_while_busy() -> None:
    slots = [Slot(0), Slot(1, busy=True)]
    assert choose_slot(slots, [1], 1, 0.1) is None
    assert choose_slot(slots, [1], 0, 0.1) is slots[0]
    slots[0].busy = True
    assert choose_slot(slots, [1], -1, 0.1) is None


def plan(slot: Slot, prompt: list[int], **kw: object) -> ReusePlan:
    args = {"cache_prompt": True, "needs_logits": True, "can_truncate": False, **kw}
    return plan_reuse(slot, prompt, **args)  # type: ignore[arg-type]


def test_an_extension_keeps_everything_without_a_checkpoint() -> None:
    assert plan(Slot(0, tokens=[1, 2, 3]), [1, 2, 3, 4]) == ReusePlan("own", 3)


def test_the_last_prompt_token_is_always_decoded_when_logits_are_needed() -> None:
    slot = Slot(0, tokens=[1, 2, 3], checkpoints=[cp(2)])
    assert plan(slot, [1, 2, 3], can_truncate=True) == ReusePlan("own", 2)
    assert plan(slot, [1, 2, 3]) == ReusePlan("own", 2, cp(2))
    assert plan(slot, [1, 2, 3], needs_logits=False) == ReusePlan("own", 3)


def test_a_divergence_restores_the_nearest_checkpoint_before_it() -> None:
    slot = Slot(0, tokens=list(range(100)), checkpoints=[cp(10, True), cp(40, True), cp(90)])
    prompt = list(range(60)) + [999]
    assert plan(slot, prompt) == ReusePlan("own", 40, cp(40, True))
    assert plan(slot, prompt, can_truncate=True) == ReusePlan("own", 60)
    assert plan(slot, [5, 6]) == ReusePlan("none")
    assert plan(slot, prompt, cache_prompt=False) == ReusePlan("none")


def test_another_slot_or_ram_wins_when_it_shares_more() -> None:
    system = list(range(50))
    mine = Slot(0, tokens=[7, 7, 7])
    other = Slot(1, tokens=system + [1, 2, 3], checkpoints=[cp(50, True)], busy=True)
    prompt = system + [4, 5]
    assert plan(mine, prompt, others=[other]) == ReusePlan("slot", 50, cp(50, True), source_slot=other)
    # a whole sequence is usable as it stands, without a checkpoint
    entry = CachedSequence(tuple(system + [4]), b"full")
    assert plan(mine, prompt, others=[other], ram=[entry]) == ReusePlan("ram", 51, None, ram_entry=entry)
    # ties go to the cheapest source
    twin = Slot(2, tokens=list(system), busy=False)
    assert plan(Slot(0, tokens=list(system)), prompt, others=[twin]).source == "own"


def test_checkpoint_positions_at_message_boundaries_and_every_256() -> None:
    end, nl = 7, 24
    system = [1, 6] + [100] * 30 + [end, nl]  # a message ends at 34
    long_user = [6] + [101] * 600 + [end, nl]  # 603 tokens: ends at 637
    prompt = system + long_user + [6, 102, 103]  # 640 tokens
    positions = checkpoint_positions(prompt, 0, turn_ends={end}, newline=nl)
    # 637 ends the last user message, 3 tokens before the end: the engine's end-of-prompt checkpoint covers it
    assert positions == [(34, True), (290, False), (546, False)]
    assert checkpoint_positions(prompt, 600, turn_ends={end}, newline=nl) == []
    longer = prompt + [104] * 20 + [end, nl] + [6] + [105] * 40
    assert checkpoint_positions(longer, 600, turn_ends={end}, newline=nl) == [(637, True), (662, True)]


def test_a_trimmed_history_gets_no_forced_checkpoint_after_the_restored_system_prompt() -> None:
    end, nl = 7, 24
    system = [1] + [100] * 40 + [end, nl]  # ends at 43, where a trimmed history restores
    messages = ([6] + [101] * 67 + [end, nl]) * 6  # boundaries at 113, 183, ..., 463
    prompt = system + messages + [6] + [102] * 30
    # Only the 256-spaced boundary and the last two: the message right after the system prompt is no split.
    assert checkpoint_positions(prompt, 43, turn_ends={end}, newline=nl) == [(323, True), (393, True), (463, True)]
    assert checkpoint_positions(prompt, 0, turn_ends={end}, newline=nl)[0] == (43, True)


def test_no_checkpoint_at_a_boundary_a_few_tokens_after_the_last() -> None:
    end, nl = 7, 24
    # A continued conversation: prefilling starts after the reply, 2 tokens before the next message starts.
    prompt = [1] + [100] * 40 + [end, nl] + [6] + [101] * 40 + [end, nl] + [6, 102, 103] * 10
    assert checkpoint_positions(prompt, 41, turn_ends={end}, newline=nl) == [(86, True)]  # not 43
    short_system = [1, 6, 100, end, nl] + [6] + [101] * 40 + [end, nl] + [6, 102, 103] * 10
    assert checkpoint_positions(short_system, 0, turn_ends={end}, newline=nl) == [(48, True)]  # not 5


def test_no_checkpoint_splits_off_a_short_stretch_before_the_next() -> None:
    end, nl = 7, 24
    user = [6] + [101] * 300 + [end, nl]  # 303 tokens: 256 + 51 would leave a 51-token call
    prompt = [1] + user + [6, 102, 103]
    assert checkpoint_positions(prompt, 0, turn_ends={end}, newline=nl) == []
    longer = [1] + [6] + [101] * 340 + [end, nl] + [6, 102, 103]  # 256 + 91: worth the split
    assert checkpoint_positions(longer, 0, turn_ends={end}, newline=nl) == [(256, False)]


def test_the_same_prompt_again_reuses_it_all_from_a_checkpoint_with_logits() -> None:
    prompt = [1, 2, 3, 4, 5]
    with_logits = Checkpoint(5, b"s", logits=b"l" * 8)
    slot = Slot(0, tokens=prompt + [9, 9], checkpoints=[cp(2), with_logits])
    assert plan(slot, prompt) == ReusePlan("own", 5, with_logits)  # nothing left to decode
    assert plan(slot, prompt, needs_logits=False) == ReusePlan("own", 5, with_logits)
    assert plan(slot, [1, 2, 3, 4, 5, 6]) == ReusePlan("own", 5, with_logits)  # a longer prompt continues from it
    without = Slot(0, tokens=prompt + [9], checkpoints=[cp(2), Checkpoint(5, b"s")])
    assert plan(without, prompt) == ReusePlan("own", 2, cp(2))  # the last token must be decoded again
    assert with_logits.n_bytes == 9


def test_checkpoints_are_bounded_thinning_the_densest_and_keeping_boundaries() -> None:
    slot = Slot(0)
    for n, boundary in [(10, True), (256, False), (300, True), (512, False), (540, True), (600, False)]:
        slot.add_checkpoint(cp(n, boundary), max_count=4, max_bytes=10**6)
    assert [c.n_tokens for c in slot.checkpoints] == [10, 300, 540, 600]
    slot.add_checkpoint(cp(700), max_count=10, max_bytes=25)  # 10 bytes each: at most 2 fit
    assert [c.n_tokens for c in slot.checkpoints] == [300, 700]  # 600, then 10, then 540 went
    slot.tokens = list(range(700))
    slot.truncate(500)
    assert len(slot.tokens) == 500 and [c.n_tokens for c in slot.checkpoints] == [300]


def test_shifted_chunks_take_the_cached_runs_the_prompt_repeats_in_order() -> None:
    cached = [1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23, 30, 31, 32]
    trimmed = [1, 2, 3, 20, 21, 22, 23, 30, 31, 32, 40]  # the 10-13 run was cut out
    assert shifted_chunks(cached, trimmed, 3, 3) == [Shift(7, 3, 7)]
    assert shifted_chunks(cached, trimmed, 3, 8) == []  # shorter than the minimum
    two_runs = [1, 2, 3, 10, 11, 12, 99, 30, 31, 32]  # 13 and 20-23 went, 99 is new
    assert shifted_chunks(cached, two_runs, 3, 3) == [Shift(3, 3, 3)]  # after 99 the prompt never matches again
    assert shifted_chunks(cached, cached, len(cached), 1) == []
