"""Pure per-request planning: which slot a request runs in, and which cached prefix it starts from.

No native calls here, so the rules are tested without a model; the engine applies the plans.

A prompt can start from three kinds of cached prefix: its own slot's memory, another slot's memory
(copied: the KV cells are shared, the recurrent state comes from a checkpoint), or a sequence state
kept in host RAM. Hybrid and sliding-window models cannot drop the tail of a sequence, so a prefix
that ends mid-memory is only usable up to the nearest checkpoint at or before the divergence.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from .records import StateBuffer

#: Within a long message, a checkpoint every this many tokens.
CHECKPOINT_EVERY = 256
#: Message boundaries this close to the end of the prompt are covered by the checkpoint at its end.
NEAR_END = 16
#: A checkpoint within a message is skipped when the next one would follow within this many tokens:
#: the short decode call it would split off costs almost as much as a long one.
MIN_STRETCH = 64
#: A message boundary this close after the previous checkpoint (or where prefilling starts, which the
#: engine checkpoints) gets none: decoding these few tokens again after restoring the earlier one costs
#: less than the extra decode call (a 4-token call at depth 1,000 takes 24 ms, ~10 prompt tokens' worth).
MIN_SPLIT = 16


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A saved partial state (recurrent / sliding-window part) after the first ``n_tokens`` tokens."""

    n_tokens: int
    state: StateBuffer
    #: Taken at a chat message boundary (kept longer than the every-256-tokens ones).
    boundary: bool = False
    #: The logits after the last of the ``n_tokens`` (float32 bytes), kept at the end of a prompt: the
    #: same prompt again starts sampling from them with nothing to decode.
    logits: bytes | None = None

    @property
    def n_bytes(self) -> int:
        return len(self.state) + len(self.logits or b"")

    def logits_row(self) -> npt.NDArray[np.float32]:
        """The kept logits as a fresh float32 row, which the sampler may adjust in place."""
        assert self.logits is not None
        return np.frombuffer(self.logits, dtype=np.float32).copy()


@dataclass(slots=True, eq=False)
class Slot:
    """One sequence of the shared context: the tokens its memory holds, in position order."""

    id: int
    n_ctx: int = 0
    tokens: list[int] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    busy: bool = False
    last_used: float = 0.0
    #: The LoRA scales its memory was computed under (:mod:`~lfmserve.engine.adapters`; empty without adapters).
    adapters: tuple[float, ...] = ()

    def truncate(self, n_tokens: int) -> None:
        """Forget tokens (and checkpoints) past ``n_tokens``."""
        del self.tokens[n_tokens:]
        self.checkpoints = [c for c in self.checkpoints if c.n_tokens <= n_tokens]

    def add_checkpoint(self, checkpoint: Checkpoint, *, max_count: int, max_bytes: int) -> None:
        """Keep checkpoints sorted and within bounds, thinning where they are densest.

        Every-256-tokens checkpoints go before message boundaries, and the newest is always kept.
        """
        self.checkpoints = [c for c in self.checkpoints if c.n_tokens != checkpoint.n_tokens]
        self.checkpoints.append(checkpoint)
        self.checkpoints.sort(key=lambda c: c.n_tokens)
        while len(self.checkpoints) > 1 and (
            len(self.checkpoints) > max_count or sum(c.n_bytes for c in self.checkpoints) > max_bytes
        ):
            del self.checkpoints[_densest(self.checkpoints)]


def _densest(checkpoints: Sequence[Checkpoint]) -> int:
    """Index of the checkpoint whose loss costs least: closest to its predecessor, non-boundary first."""
    candidates = range(len(checkpoints) - 1)  # never the newest
    return min(
        candidates,
        key=lambda i: (checkpoints[i].boundary, checkpoints[i].n_tokens - (checkpoints[i - 1].n_tokens if i else 0)),
    )


def _checkpoint_at_or_before(checkpoints: Sequence[Checkpoint], n_tokens: int) -> Checkpoint | None:
    best = None
    for checkpoint in checkpoints:
        if checkpoint.n_tokens <= n_tokens:
            best = checkpoint
    return best


@dataclass(frozen=True, slots=True)
class CachedSequence:
    """A sequence state kept in host RAM after it left its slot (``--cache-ram``)."""

    tokens: tuple[int, ...]
    state: StateBuffer
    checkpoints: tuple[Checkpoint, ...] = ()
    #: The LoRA scales it was computed under.
    adapters: tuple[float, ...] = ()

    @property
    def n_bytes(self) -> int:
        return len(self.state) + sum(c.n_bytes for c in self.checkpoints)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64))
    return int(diff[0]) if diff.size else n


def choose_slot(slots: Sequence[Slot], prompt: Sequence[int], id_slot: int, similarity: float) -> Slot | None:
    """The slot for a request, or None while it has to wait (llama-server's rule).

    A pinned ``id_slot`` waits for that slot. Otherwise the idle slot whose cached tokens share the
    largest fraction of the prompt, above ``similarity``; failing that the least recently used idle slot.
    """
    if id_slot >= 0:
        slot = slots[id_slot]
        return None if slot.busy else slot
    idle = [s for s in slots if not s.busy]
    if not idle:
        return None
    best, best_fraction = None, 0.0
    for slot in idle:
        if slot.tokens:
            fraction = common_prefix_length(slot.tokens, prompt) / len(prompt)
            if fraction > best_fraction and fraction > similarity:
                best, best_fraction = slot, fraction
    return best or min(idle, key=lambda s: s.last_used)


def usable_prefix(
    tokens: Sequence[int],
    checkpoints: Sequence[Checkpoint],
    prompt: Sequence[int],
    *,
    needs_logits: bool,
    can_truncate: bool,
) -> tuple[int, Checkpoint | None]:
    """How much of a cached sequence a prompt can start from, and the checkpoint that makes it exact.

    When logits are needed the last prompt token is decoded again, unless a checkpoint at the end of
    this very prompt kept its logits (then all of it is reused). The whole memory is usable as it
    stands; a prefix of it only where the memory can be truncated, or up to the nearest checkpoint
    (returned: its state must be restored).
    """
    shared = common_prefix_length(tokens, prompt)
    if needs_logits and shared == len(prompt):
        end = next((c for c in checkpoints if c.n_tokens == len(prompt) and c.logits is not None), None)
        if end is not None:
            return len(prompt), end
    shared = min(shared, len(prompt) - 1 if needs_logits else len(prompt))
    if shared == len(tokens) or can_truncate:
        return shared, None
    checkpoint = _checkpoint_at_or_before(checkpoints, shared)
    if checkpoint is None:
        return 0, None
    return checkpoint.n_tokens, checkpoint


@dataclass(frozen=True, slots=True)
class ReusePlan:
    """Where a request's cached prefix comes from and how long it is."""

    source: Literal["none", "own", "slot", "ram"]
    keep: int = 0
    #: The state to restore after the copy or truncation (None: the memory is exact as it stands).
    checkpoint: Checkpoint | None = None
    source_slot: Slot | None = None
    ram_entry: CachedSequence | None = None


def plan_reuse(
    slot: Slot,
    prompt: Sequence[int],
    *,
    others: Sequence[Slot] = (),
    ram: Sequence[CachedSequence] = (),
    cache_prompt: bool,
    needs_logits: bool,
    can_truncate: bool,
    adapters: tuple[float, ...] = (),
) -> ReusePlan:
    """The longest cached prefix for ``prompt`` in ``slot``: its own memory, another slot's, or RAM's.

    Only memory computed under the same LoRA ``adapters`` scales counts. Ties go to the cheapest source (own
    memory, then a slot copy, then a RAM restore).
    """
    if not cache_prompt:
        return ReusePlan("none")
    options = {"needs_logits": needs_logits, "can_truncate": can_truncate}
    best = ReusePlan("none")
    if slot.adapters == adapters:
        keep, checkpoint = usable_prefix(slot.tokens, slot.checkpoints, prompt, **options)
        best = ReusePlan("own", keep, checkpoint) if keep > 0 else best
    for other in (o for o in others if o.adapters == adapters):
        n, cp = usable_prefix(other.tokens, other.checkpoints, prompt, **options)
        if n > best.keep:
            best = ReusePlan("slot", n, cp, source_slot=other)
    for entry in (e for e in ram if e.adapters == adapters):
        n, cp = usable_prefix(entry.tokens, entry.checkpoints, prompt, **options)
        if n > best.keep:
            best = ReusePlan("ram", n, cp, ram_entry=entry)
    return best


@dataclass(frozen=True, slots=True)
class Shift:
    """A run of cached tokens that reappears later in the prompt: cached positions [source, source + n)
    move to [target, target + n)."""

    source: int
    target: int
    n: int


def shifted_chunks(cached: Sequence[int], prompt: Sequence[int], start: int, min_chunk: int) -> list[Shift]:
    """llama-server's ``--cache-reuse``: after the common prefix ``start``, the cached runs of at least
    ``min_chunk`` tokens that the prompt continues with, in order (greedy: a run is taken where it
    first matches, and skipped cached tokens are dropped)."""
    shifts: list[Shift] = []
    head_c = head_p = start
    while head_c < len(cached) and head_p < len(prompt):
        n = 0
        while head_c + n < len(cached) and head_p + n < len(prompt) and cached[head_c + n] == prompt[head_p + n]:
            n += 1
        if n >= min_chunk:
            shifts.append(Shift(head_c, head_p, n))
            head_c += n
            head_p += n
        else:
            head_c += 1
    return shifts


def checkpoint_positions(
    prompt: Sequence[int],
    start: int,
    *,
    turn_ends: Collection[int],
    newline: int | None,
    media_ends: Collection[int] = (),
    every: int = CHECKPOINT_EVERY,
) -> list[tuple[int, bool]]:
    """Where prefilling ``prompt`` from ``start`` stops to checkpoint: (position, is a message boundary).

    A message ends after an end-of-turn token and the newline that follows it (ChatML's
    ``<|im_end|>\\n``); so does a media item (``media_ends``: another question about the same image
    restarts right after it). Long stretches get a checkpoint every ``every`` tokens (none closer than
    ``MIN_STRETCH`` to the next checkpoint, so no stretch exceeds ``every + MIN_STRETCH``). The state at
    the end of the prompt, with its logits, is kept by the engine after the last chunk (no split needed).
    """
    boundaries = set(media_ends)
    for i, token in enumerate(prompt[:-1]):
        if token in turn_ends:
            end = i + 2 if newline is not None and prompt[i + 1] == newline else i + 1
            boundaries.add(end)
    positions: list[tuple[int, bool]] = []
    last = start
    # A boundary just before the end (the end of the user's message, then the generation prompt) would
    # nearly duplicate the checkpoint the engine keeps at the end of every prompt, for one more decode call.
    candidates = sorted(b for b in boundaries if start < b < len(prompt) - NEAR_END)
    # Each checkpoint splits the prefill into another decode call (measured: 6-12% slower on a cold
    # 2,200-token chat). So boundaries closer than ``every`` to the previous checkpoint are skipped,
    # except the prompt's first (the end of the system prompt, for trimmed and shared prompts) and the
    # last two (the messages a client edits or continues).
    always = {min(boundaries, default=0), *candidates[-2:], *media_ends}
    for p in candidates:
        while p - last >= every + MIN_STRETCH:
            last += every
            positions.append((last, False))
        if p - last < MIN_SPLIT:
            continue
        if p in always or p - last >= every:
            positions.append((p, True))
            last = p
    while len(prompt) - last >= every + MIN_STRETCH:
        last += every
        positions.append((last, False))
    return positions
