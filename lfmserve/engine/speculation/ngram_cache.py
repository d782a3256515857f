"""``ngram-cache``: counts of the token after every 1- to 4-gram of the request, drafted greedily.

llama-server's ``common_ngram_cache`` with its context cache (the static and dynamic caches it can load
from files are not read: ``--lookup-cache-static/-dynamic`` are not flags here). Each drafted token is the
most frequent follower of the longest n-gram ending the history (and the draft so far) whose followers
are frequent and dominant enough: at least 2, 2, 1, 1 occurrences and 66, 50, 50, 50 percent for n-grams
of 1, 2, 3, 4 tokens. Up to 8 tokens per draft, as there.
"""

from __future__ import annotations

from collections.abc import Sequence

from .config import NGRAM_CACHE_DRAFT
from .worth import Acceptance

NGRAM_MIN = 1
NGRAM_MAX = 4
#: By n-gram length (1 .. 4): the followers a draft needs at least, and the share the chosen one must have.
MIN_SAMPLES = (2, 2, 1, 1)
MIN_PERCENT = (66, 50, 50, 50)


class NgramCache:
    """One generation's cache of n-gram followers."""

    own_acceptance: Acceptance | None = None  # one record: the generation's

    def __init__(self) -> None:
        self._counts: dict[tuple[int, ...], dict[int, int]] = {}
        self._cached = 0  # history tokens counted so far

    def _update(self, new: Sequence[int]) -> None:
        """Count the followers within ``new`` (as llama-server, n-grams across two updates are not counted)."""
        for size in range(NGRAM_MIN, NGRAM_MAX + 1):
            for i in range(size, len(new)):
                followers = self._counts.setdefault(tuple(new[i - size : i]), {})
                followers[new[i]] = followers.get(new[i], 0) + 1

    def _next(self, seq: Sequence[int]) -> int | None:
        """The token to draft after ``seq``, if a long enough n-gram ending it is dominated by one follower."""
        for size in range(min(NGRAM_MAX, len(seq)), NGRAM_MIN - 1, -1):
            followers = self._counts.get(tuple(seq[len(seq) - size :]))
            if not followers:
                continue
            token, count = max(followers.items(), key=lambda item: item[1])
            total = sum(followers.values())
            if total >= MIN_SAMPLES[size - 1] and 100 * count >= MIN_PERCENT[size - 1] * total:
                return token
        return None

    def draft(self, tokens: Sequence[int], sampled: int) -> list[int]:
        if self._cached < len(tokens) + 1:
            self._update([*tokens[self._cached :], sampled])
            self._cached = len(tokens) + 1
        seq = [*tokens[-NGRAM_MAX:], sampled]
        draft: list[int] = []
        while len(draft) < NGRAM_CACHE_DRAFT:
            token = self._next(seq)
            if token is None or token < 0:
                break
            draft.append(token)
            seq.append(token)
        return draft

    def accept(self, n_accepted: int) -> None:
        """Nothing to learn beyond the counts."""
