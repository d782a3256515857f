"""How long a draft is worth verifying: each slot's measured acceptance against what verification costs.

On a CPU, verification is not free. Each drafted position computes the whole vocabulary's logits, and the
cost of a batch is a step function of its size, because llama.cpp's matrix kernels take four columns at a
time (docs/benchmarks.md has the measured table). A CPU verifies a few tokens cheaply only while it is
memory-bound. A batch that other slots' tokens already fill is compute-bound before any draft joins it, so
there a draft pays only when nearly all of it is kept, and speculation backs off by itself. The engine
measures the costs between requests, and again when the machine has changed (with ``--spec-exact``, at start):
:mod:`.costs`; until then, a linear model stands in.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass

#: The linear stand-in, in steps of one token: the second token adds 0.8 of a step, each further one 0.4.
SECOND_TOKEN_COST = 0.8
NEXT_TOKEN_COST = 0.4
#: A decode time replaces a measured one when it is faster by more than this fraction (smaller: timer noise).
REFINES = 0.03
#: The columns of a batch llama.cpp's CPU matrix kernels take at a time.
KERNEL_COLUMNS = 4
#: How fast old drafts stop counting: each new one weighs as much as the last ten or so together.
ACCEPTANCE_DECAY = 0.9


def step_cost(n_tokens: int) -> float:
    """The linear model's time for one decode of ``n_tokens``, in decodes of a single token."""
    return 1.0 + SECOND_TOKEN_COST + NEXT_TOKEN_COST * (n_tokens - 2) if n_tokens > 1 else 1.0


class BatchCosts:
    """A decode's time by its token count, in decodes of one token, read from the measured counts.

    A count between two measured ones costs what the next one up costs, because it takes the same groups of
    the kernels' columns. Past the last measured count, the cost grows as it grew between the last two. A
    multiple of four (whole groups of columns) never costs more than a larger multiple: a slower time means the
    machine was busy elsewhere while it was measured, so the larger multiple's time replaces it. Other counts
    may cost more than a larger one: 7 tokens cost more than 8.
    """

    def __init__(self, measured: Mapping[int, float] | None = None, *, observed: frozenset[int] = frozenset()) -> None:
        """``measured[n]``: the seconds of a decode of ``n`` tokens (1 among them); none: the linear model.
        ``observed``: the counts whose time is the engine's own decodes' (:meth:`refined`)."""
        measured = measured or {}
        self._observed = observed
        #: The counts measured, ascending, and their costs in single decodes (both empty: the linear model).
        self.counts = tuple(sorted(measured))
        self._seconds = {n: float(measured[n]) for n in self.counts}
        units = [float(measured[n]) / float(measured[1]) for n in self.counts]
        fours = [i for i, n in enumerate(self.counts) if n % KERNEL_COLUMNS == 0]
        for smaller, larger in reversed(list(zip(fours, fours[1:], strict=False))):
            units[smaller] = min(units[smaller], units[larger])
        self.units = tuple(units)
        self._slope = 0.0
        if len(self.counts) >= 2:
            rise = self.units[-1] - self.units[-2]
            self._slope = max(rise / (self.counts[-1] - self.counts[-2]), 0.0)

    def refined(self, n_tokens: int, seconds: float) -> BatchCosts | None:
        """These costs with a decode of ``n_tokens`` the engine ran for its generations counted (None: unchanged,
        and for the linear model).

        The measurement between requests may have run while the machine was busy elsewhere (another server
        decoding beside). So the engine's own decodes are the figures that count: the first of a count replaces
        the measured time, a later one replaces it when faster by more than :data:`REFINES` (noise only ever
        adds). A measured count no decode has timed yet keeps its measured ratio to the single decode.
        """
        if not self._seconds:
            return None
        if n_tokens in self._observed and seconds >= self._seconds[n_tokens] * (1 - REFINES):
            return None
        measured = dict(self._seconds)
        if n_tokens == 1:
            scale = seconds / measured[1]
            measured = {n: t if n in self._observed else t * scale for n, t in measured.items()}
        measured[n_tokens] = seconds
        return BatchCosts(measured, observed=self._observed | {n_tokens})

    def __call__(self, n_tokens: int) -> float:
        if not self.units:
            return step_cost(n_tokens)
        i = bisect.bisect_left(self.counts, n_tokens)
        if i < len(self.counts):
            return self.units[i]
        return self.units[-1] + self._slope * (n_tokens - self.counts[-1])


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

    def q_with(self, kept: int) -> float:
        """``q`` with ``kept`` more tokens counted as kept: an unverified guess matched so far, still compared."""
        return (self.kept + kept) / (self.kept + kept + self.cut)

    def update(self, accepted: int, cut_short: bool) -> None:
        self.kept = self.kept * ACCEPTANCE_DECAY + accepted
        self.cut = self.cut * ACCEPTANCE_DECAY + cut_short


def expected_kept(q: float, k: int) -> float:
    """Tokens a draft of ``k`` keeps on average: q + q**2 + ... + q**k."""
    return sum(q**i for i in range(1, k + 1))


#: What a batch must save on its single decodes for drafts to be worth running at all: the drafters' own time each
#: step, and the noise of costs measured once, on an empty sequence (measured here: 2 and 3 tokens of Gemma-3-270M
#: cost 2.24 and 3.04 single decodes one day and a little under 2 and 3 another, and with drafts held to such
#: batches, decoding ran at 0.71x to 0.84x of decoding without them).
PAYING_SHARE = 0.8


def drafts_can_pay(costs: BatchCosts, max_batch: int) -> bool:
    """Whether a batch of at most ``max_batch`` tokens, a pending token and its draft, decodes clearly faster than
    its tokens one at a time (in :data:`PAYING_SHARE` of their time): if none does, not even a draft always kept
    pays for drafting."""
    return any(costs(n) < PAYING_SHARE * n for n in range(2, max_batch + 1))


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
