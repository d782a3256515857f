from lfmserve.scheduler import Checkpoint, ReusePlan, Slot, choose_slot, common_prefix_length, plan_reuse


def test_common_prefix_length() -> None:
    assert common_prefix_length([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_length([1, 2], [1, 2, 3]) == 2
    assert common_prefix_length([], [1]) == 0


def test_choose_slot_prefers_the_longest_shared_prefix_then_lru() -> None:
    slots = [Slot(0, [9, 9], last_used=1.0), Slot(1, [1, 2, 3], last_used=5.0), Slot(2, [], last_used=0.5)]
    assert choose_slot(slots, [1, 2, 7], -1) is slots[1]
    assert choose_slot(slots, [5], -1) is slots[2]  # nothing shared: least recently used
    slots[1].busy = True
    assert choose_slot(slots, [1, 2, 7], -1) is slots[2]


def test_a_pinned_slot_waits_while_busy() -> None:
    slots = [Slot(0), Slot(1, busy=True)]
    assert choose_slot(slots, [1], 1) is None
    assert choose_slot(slots, [1], 0) is slots[0]
    slots[0].busy = True
    assert choose_slot(slots, [1], -1) is None


def test_an_extension_keeps_everything() -> None:
    slot = Slot(0, [1, 2, 3])
    assert plan_reuse(slot, [1, 2, 3, 4], cache_prompt=True, needs_logits=True, can_truncate=False) == ReusePlan(3)


def test_the_last_prompt_token_is_always_decoded_when_logits_are_needed() -> None:
    slot = Slot(0, [1, 2, 3], checkpoint=Checkpoint(2, b"s"))
    assert plan_reuse(slot, [1, 2, 3], cache_prompt=True, needs_logits=True, can_truncate=True) == ReusePlan(2)
    assert plan_reuse(slot, [1, 2, 3], cache_prompt=True, needs_logits=True, can_truncate=False) == ReusePlan(
        2, restore=True
    )
    assert plan_reuse(slot, [1, 2, 3], cache_prompt=True, needs_logits=False, can_truncate=False) == ReusePlan(3)


def test_a_divergence_without_a_usable_checkpoint_starts_over() -> None:
    slot = Slot(0, [1, 2, 3, 4], checkpoint=Checkpoint(3, b"s"))
    assert plan_reuse(slot, [1, 2, 9], cache_prompt=True, needs_logits=True, can_truncate=False) == ReusePlan(
        0, clear=True
    )
    assert plan_reuse(slot, [1, 2, 9], cache_prompt=True, needs_logits=True, can_truncate=True) == ReusePlan(2)


def test_cache_prompt_false_clears() -> None:
    assert plan_reuse(Slot(0, [1]), [1, 2], cache_prompt=False, needs_logits=True, can_truncate=True) == ReusePlan(
        0, clear=True
    )
