"""How long a draft is worth verifying: each slot's measured acceptance against what verification costs.

On 2 cores verification is not free, and its cost is not even smooth in the batch's size: Gemma-3-270M
decodes 1 token in 18 ms, 4 in 45, 5 in 64, 8 in 67, 12 in 102, 13 in 115, 16 in 118, 48 in 274 (each
drafted position computes the whole vocabulary's logits, and llama.cpp's matrix kernels work on the batch
four columns at a time). A CPU verifies a few tokens for little only while it is memory-bound; past that
each costs compute, and a batch already full of other slots' tokens is compute-bound before any draft
joins it, so there drafts pay only when nearly all of them are kept: speculation backs off by itself.
The costs are measured once, when the engine starts (:mod:`.costs`); without a measurement a linear
model stands in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: The linear stand-in, in steps of one token: the second token adds 0.8 of a step, each further one 0.4.
SECOND_TOKEN_COST = 0.8
NEXT_TOKEN_COST = 0.4
#: How fast old drafts stop counting: each new one weighs as much as the last ten or so together.
ACCEPTANCE_DECAY = 0.9


def step_cost(n_tokens: int) -> float:
    """The linear model's time for one decode of ``n_tokens``, in decodes of a single token."""
    return 1.0 + SECOND_TOKEN_COST + NEXT_TOKEN_COST * (n_tokens - 2) if n_tokens > 1 else 1.0


class BatchCosts:
    """A decode's time by its token count, in decodes of one token: measured up to some count, and past it
    the measured points' trend (a least-squares line through the upper half of them).
    """

    def __init__(self, measured: Sequence[float] = ()) -> None:
        """``measured[i]``: the seconds of a decode of ``i + 1`` tokens; empty: the linear model."""
        #: The measured part of the table, in single decodes (empty for the linear model).
        self.units = tuple(float(t) / float(measured[0]) for t in measured) if len(measured) else ()
        self._slope, self._intercept = 0.0, 0.0
        if len(self.units) >= 4:
            upper = np.arange(len(self.units) // 2, len(self.units))
            slope, intercept = np.polyfit(upper + 1, np.asarray(self.units)[upper], 1)
            self._slope, self._intercept = max(float(slope), 0.0), float(intercept)

    def __call__(self, n_tokens: int) -> float:
        units = self.units
        if not units:
            return step_cost(n_tokens)
        if n_tokens <= len(units):
            return units[max(n_tokens, 1) - 1]
        return max(self._intercept + self._slope * n_tokens, units[-1])


#: The stand-in used where nothing was measured.
LINEAR_COSTS = BatchCosts()


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


def expected_kept(q: float, k: int) -> float:
    """Tokens a draft of ``k`` keeps on average: q + q**2 + ... + q**k."""
    return sum(q**i for i in range(1, k + 1))


def best_draft_length(
    q: float, available: int, *, streams: float = 1.0, batch: int = 1, costs: BatchCosts = LINEAR_COSTS
) -> int:
    """The draft length (at most ``available``) that makes the step yield the most tokens per unit of time.

    The step already holds ``batch`` tokens and yields ``streams`` tokens (its generations' next tokens, and
    what the drafts already in it are expected to keep). 0 when no draft makes the step faster per token.
    """
    base = streams / costs(batch)
    best, best_rate, expected, run = 0, base, 0.0, 1.0
    for k in range(1, available + 1):
        run *= q
        expected += run
        rate = (streams + expected) / costs(batch + k)
        if rate > best_rate:
            best, best_rate = k, rate
    return best
