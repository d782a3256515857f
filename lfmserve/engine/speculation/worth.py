"""How long a draft is worth verifying: each slot's measured acceptance against what verification costs.

On 2 cores verification is not free: Gemma-3-270M decodes 1 token in 18 ms, 2 in 33 ms, 8 in 71 ms, 48 in
372 ms (each drafted position computes the whole vocabulary's logits). A CPU verifies a few tokens for
little only while it is memory-bound; past that each costs compute, and a batch already full of other
slots' tokens is compute-bound before any draft joins it, so there drafts pay only when nearly all of
them are kept: speculation backs off by itself.
"""

from __future__ import annotations

from dataclasses import dataclass

#: A batch's decode time in steps of one token: the second token adds 0.8 of a step, each further one 0.4.
SECOND_TOKEN_COST = 0.8
NEXT_TOKEN_COST = 0.4
#: How fast old drafts stop counting: each new one weighs as much as the last ten or so together.
ACCEPTANCE_DECAY = 0.9


def step_cost(n_tokens: int) -> float:
    """The time one decode of ``n_tokens`` takes, in decodes of a single token."""
    return 1.0 + SECOND_TOKEN_COST + NEXT_TOKEN_COST * (n_tokens - 2) if n_tokens > 1 else 1.0


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


def best_draft_length(q: float, available: int, *, streams: float = 1.0, batch: int = 1) -> int:
    """The draft length (at most ``available``) that makes the step yield the most tokens per unit of time.

    The step already holds ``batch`` tokens and yields ``streams`` tokens (its generations' next tokens, and
    what the drafts already in it are expected to keep). 0 when no draft makes the step faster per token.
    """
    base = streams / step_cost(batch)
    best, best_rate, expected, run = 0, base, 0.0, 1.0
    for k in range(1, available + 1):
        run *= q
        expected += run
        rate = (streams + expected) / step_cost(batch + k)
        if rate > best_rate:
            best, best_rate = k, rate
    return best
