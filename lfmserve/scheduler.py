"""Pure per-request planning: which slot a request runs in and how much of its cache it keeps.

No native calls here, so the rules are tested without a model. The engine owns the slots and
applies the plans (``engine.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(slots=True)
class Checkpoint:
    """A saved partial state (recurrent / sliding-window part) covering the first ``n_tokens``."""

    n_tokens: int
    state: bytes


@dataclass(slots=True, eq=False)
class Slot:
    """One sequence of the shared context: the tokens its memory holds, in position order."""

    id: int
    tokens: list[int] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    busy: bool = False
    last_used: float = 0.0


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64))
    return int(diff[0]) if diff.size else n


def choose_slot(slots: Sequence[Slot], prompt: Sequence[int], id_slot: int) -> Slot | None:
    """The slot for a request, or None while it has to wait.

    A pinned ``id_slot`` waits for that slot. Otherwise the idle slot whose cache shares the longest
    prefix with the prompt wins; with no shared prefix, the least recently used idle slot.
    """
    if id_slot >= 0:
        slot = slots[id_slot]
        return None if slot.busy else slot
    idle = [s for s in slots if not s.busy]
    if not idle:
        return None
    best = max(idle, key=lambda s: (common_prefix_length(s.tokens, prompt), -s.last_used))
    if common_prefix_length(best.tokens, prompt) > 0:
        return best
    return min(idle, key=lambda s: s.last_used)


@dataclass(frozen=True, slots=True)
class ReusePlan:
    """How to bring a slot's memory to a prefix of the new prompt.

    ``keep`` tokens stay; ``restore`` says whether the checkpoint must be loaded first (the memory
    cannot drop a tail by position alone); ``clear`` drops everything.
    """

    keep: int
    restore: bool = False
    clear: bool = False


def plan_reuse(
    slot: Slot, prompt: Sequence[int], *, cache_prompt: bool, needs_logits: bool, can_truncate: bool
) -> ReusePlan:
    """Longest reusable prefix of ``slot.tokens`` for ``prompt``.

    At least one prompt token is always left to decode when the request needs logits. A memory that
    cannot be truncated (recurrent, sliding window) falls back to its checkpoint when that covers
    no more than the shared prefix, and otherwise starts over.
    """
    if not cache_prompt or not slot.tokens:
        return ReusePlan(keep=0, clear=bool(slot.tokens))
    shared = common_prefix_length(slot.tokens, prompt)
    if needs_logits:
        shared = min(shared, len(prompt) - 1)
    if shared == len(slot.tokens) or can_truncate:
        return ReusePlan(keep=shared)
    checkpoint = slot.checkpoint
    if checkpoint is not None and 0 < checkpoint.n_tokens <= shared:
        return ReusePlan(keep=checkpoint.n_tokens, restore=True)
    return ReusePlan(keep=0, clear=True)
