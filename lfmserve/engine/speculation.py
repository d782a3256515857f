"""Speculative decoding's drafts: tokens guessed from the request's own history, verified in the step's batch.

Decoding one token costs a pass over the weights; checking guessed tokens in the same batch costs less
than decoding each, though not nothing on 2 cores (see :data:`FIRST_DRAFT_COST`). A request that copies
from its prompt (a summary that quotes, JSON over a described scene, a document repeated with fixes)
repeats runs of tokens it has seen, so the continuation of the last place its latest tokens occurred is a
good guess. The batch step decodes the pending token and the draft together; the generation samples each
position in turn and keeps the drafted tokens while they are what it samples, so the output is the one
decoding without a draft gives. How much of a draft is verified follows each slot's measured acceptance
(:func:`best_draft_length`).

``ngram-simple`` is llama-server's: the last ``size_n`` tokens (the sampled one last) are looked up in the
history, latest occurrence first, and up to ``size_m`` tokens that followed it are the draft (none shorter
than ``size_n``, as there).

Example::

    drafter = NgramSimple(size_n=12, size_m=48)
    draft = drafter.draft(slot_tokens, pending_token)  # [] when the history has no match
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: The ``--spec-type`` values lfmserve drafts with.
SPEC_TYPES = ("ngram-simple",)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculationConfig:
    """``--spec-type`` and its sizes (llama-server's flags and defaults)."""

    types: tuple[str, ...] = ()
    #: Most drafted tokens per step (``--spec-draft-n-max``; 0: the drafter's own, ``size_m`` for n-grams).
    n_max: int = 0
    #: Drafts shorter than this are not verified (``--spec-draft-n-min``).
    n_min: int = 0
    ngram_size_n: int = 12
    ngram_size_m: int = 48

    @property
    def enabled(self) -> bool:
        return bool(self.types)

    @property
    def type_names(self) -> str:
        """As llama-server reports them (``/props`` ``params["speculative.types"]``): comma-joined, or none."""
        return ",".join(self.types) or "none"

    @property
    def max_draft(self) -> int:
        """The longest draft a step verifies."""
        return min(self.n_max, self.ngram_size_m) if self.n_max > 0 else self.ngram_size_m


#: The cost of verifying drafted tokens, in decode steps of one token: the first adds 0.8 of a step, each
#: further one 0.4 (Gemma-3-270M on 2 cores: 1 token 18 ms, 2 in 33 ms, 8 in 71 ms, 48 in 372 ms; each
#: drafted position computes the whole vocabulary's logits). A CPU verifies a few tokens for little only
#: while it is memory-bound; past that each costs compute.
FIRST_DRAFT_COST = 0.8
NEXT_DRAFT_COST = 0.4
#: How fast old drafts stop counting: each new one weighs as much as the last ten or so together.
ACCEPTANCE_DECAY = 0.9


@dataclass(slots=True)
class Acceptance:
    """A slot's drafts so far, as the chance ``q`` that a drafted token is kept when the one before it was.

    Counted with decay, from a prior of 9 kept to 1 cut (a fresh slot drafts), both from verified drafts and
    from drafts left unverified whose tokens are compared with what was then sampled (free to observe).
    """

    kept: float = 9.0
    cut: float = 1.0

    @property
    def q(self) -> float:
        return self.kept / (self.kept + self.cut)

    def update(self, accepted: int, cut_short: bool) -> None:
        self.kept = self.kept * ACCEPTANCE_DECAY + accepted
        self.cut = self.cut * ACCEPTANCE_DECAY + cut_short


def best_draft_length(q: float, available: int) -> int:
    """The draft length (at most ``available``) with the most decode steps saved, net of verifying it: a
    draft of k keeps q + q**2 + ... + q**k tokens on average. 0 when no length pays."""
    best, best_gain, expected, run = 0, 0.0, 0.0, 1.0
    for k in range(1, available + 1):
        run *= q
        expected += run
        gain = expected - FIRST_DRAFT_COST - NEXT_DRAFT_COST * (k - 1)
        if gain > best_gain:
            best, best_gain = k, gain
    return best


class NgramSimple:
    """llama-server's ``ngram-simple`` drafter (``common_ngram_simple_draft``)."""

    def __init__(self, *, size_n: int, size_m: int) -> None:
        if size_n < 1 or size_m < 1:
            raise ValueError("n-gram sizes must be at least 1")
        self.size_n = size_n
        self.size_m = size_m

    def draft(self, tokens: Sequence[int], sampled: int) -> list[int]:
        """The tokens that followed the latest earlier occurrence of ``tokens[-(n-1):] + [sampled]``.

        ``tokens`` are those in the slot's memory; media positions (negative ids) end a draft.
        """
        n, cur_len = self.size_n, len(tokens)
        if cur_len <= n + self.size_m + 1:
            return []
        history = np.asarray(tokens, dtype=np.int64)
        pattern = np.append(history[cur_len - n + 1 :], sampled)
        # Candidate starts 1 .. cur_len - n - 1 (0 means "no match" there, so it is never one), latest first.
        starts = np.flatnonzero(history[1 : cur_len - n] == pattern[0]) + 1
        for start in starts[::-1]:
            if np.array_equal(history[start : start + n], pattern):
                copy = min(self.size_m, cur_len - (int(start) + n))
                if copy < n:
                    return []
                draft = history[start + n : start + n + copy]
                media = np.flatnonzero(draft < 0)
                return [int(t) for t in draft[: media[0] if media.size else copy]]
        return []
