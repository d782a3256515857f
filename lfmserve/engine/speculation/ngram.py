"""Drafts from the request's own history: what followed an earlier occurrence of its latest tokens.

A request that copies from its prompt (a summary that quotes, JSON over a described scene, a document
repeated with fixes) repeats runs of tokens it has seen. ``ngram-simple`` and ``ngram-map-k``/``-k4v`` are
llama-server's (``common/ngram-map.cpp``): the last ``size_n`` tokens (the sampled one last) are looked up
in the history, and the tokens that followed them are the draft. Media positions (negative ids) end a
draft: they are no tokens to guess.

Example::

    drafter = NgramSimple(NgramSizes(size_n=12, size_m=48))
    draft = drafter.draft(slot_tokens, pending_token)  # [] when the history has no match
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from .config import NgramSizes
from .worth import Acceptance

#: ``ngram-map-k4v``: the different continuations remembered per key.
MAX_VALUES = 4


class Drafter(Protocol):
    """One generation's drafter: guesses, then hears how many of its last guess were kept.

    ``own_acceptance``: the record its latest guess is measured by, where the drafter tells guesses of
    different reliability apart (None: the generation's one record).
    """

    own_acceptance: Acceptance | None

    def draft(self, tokens: Sequence[int], sampled: int) -> list[int]: ...

    def accept(self, n_accepted: int) -> None: ...


def text_only(draft: Sequence[int]) -> list[int]:
    """``draft`` up to its first media position."""
    for i, token in enumerate(draft):
        if token < 0:
            return [int(t) for t in draft[:i]]
    return [int(t) for t in draft]


#: Re-alignment after a draft was cut short: the latest 3 tokens are looked for close to where the copy would
#: have gone on (a few tokens back, up to 24 ahead), since a fix skips or inserts a few tokens. Shorter matches
#: re-aligned wrongly more often than they helped when the benchmark's replies were replayed through the
#: drafter (docs/benchmarks.md, speculation).
REALIGN_LENGTHS = (3,)
REALIGN_BEHIND = 3
REALIGN_AHEAD = 24
#: The shortest match of the latest tokens anywhere in the history that drafts when nothing else does.
MIN_SUFFIX_MATCH = 3
#: What short-match guesses are assumed to keep before any is measured: q = 0.7, too little to verify, so
#: they are first compared with what is sampled (free), and verified once they have been right for a few tokens.
SHORT_MATCH_PRIOR = Acceptance(kept=7.0, cut=3.0)


class NgramSimple:
    """``ngram-simple`` (``common_ngram_simple_draft``): the latest earlier occurrence of the pattern, and up
    to ``size_m`` tokens after it (none when fewer than ``size_n`` follow).

    lfmserve adds two shorter look-ups for when that one finds nothing, with their own acceptance record
    (their guesses are right less often; measured together with the long matches they cut those short):

    - Re-alignment. Where a reply copies with changes (a typo fixed, a word reformatted), a draft is cut at
      the change, and llama-server's look-up finds the copy again only once ``size_n`` (12) tokens after it
      match the history. Here the latest 3 tokens are looked for near the place the copy had reached, so
      drafting resumes 3 tokens after the change.
    - The longest match of the latest tokens anywhere in the history (3 tokens at least, the latest of the
      longest): a reply that starts to copy, or jumps to another part of what it copies.

    Replaying the benchmark's greedy replies (``bench/spec_replay.py``) they add 0-2 %: those replies leave
    the document rarely. Free writing rarely matches 3 tokens, and what matches is measured (left
    unverified, compared with what is sampled) before it costs.
    """

    def __init__(self, sizes: NgramSizes) -> None:
        self.size_n = sizes.size_n
        self.size_m = sizes.size_m
        #: Where in the history the token sampled at the next call would be, were the copy going on.
        self._expected: int | None = None
        self._drafted_from = 0
        self._short_match_acceptance = Acceptance(SHORT_MATCH_PRIOR.kept, SHORT_MATCH_PRIOR.cut)
        self.own_acceptance: Acceptance | None = None

    def draft(self, tokens: Sequence[int], sampled: int) -> list[int]:
        if self._expected is not None:
            self._expected += 1  # the reply moved on by a token since (a draft's own tokens: in ``accept``)
        self.own_acceptance = None
        history = np.asarray(tokens, dtype=np.int64)  # for both look-ups that scan the whole of it
        start = self._lookup(history, sampled)
        if start is None:
            self.own_acceptance = self._short_match_acceptance
            start = self._realign(tokens, sampled)
            if start is None:
                start = self._longest_match(history, sampled)
        if start is None:
            return []
        self._expected, self._drafted_from = start - 1, start
        return text_only(tokens[start : start + self.size_m])

    def _lookup(self, history: npt.NDArray[np.int64], sampled: int) -> int | None:
        """llama-server's look-up: where the draft starts in the history, or None."""
        n, cur_len = self.size_n, len(history)
        if cur_len <= n + self.size_m + 1:
            return None
        pattern = np.append(history[cur_len - n + 1 :], sampled)
        # Candidate starts 1 .. cur_len - n - 1 (0 means "no match" there, so it is never one), latest first.
        starts = np.flatnonzero(history[1 : cur_len - n] == pattern[0]) + 1
        for match in starts[::-1]:
            if np.array_equal(history[match : match + n], pattern):
                copy = min(self.size_m, cur_len - (int(match) + n))
                return int(match) + n if copy >= n else None
        return None

    def _realign(self, tokens: Sequence[int], sampled: int) -> int | None:
        """Where the copy resumes: after the latest tokens' occurrence nearest the expected place, or None."""
        expected = self._expected
        if expected is None:
            return None
        cur_len = len(tokens)
        lo, hi = max(expected - REALIGN_BEHIND, 1), min(expected + REALIGN_AHEAD, cur_len - 1)
        for m in REALIGN_LENGTHS:
            tail = [*tokens[cur_len - m + 1 :], sampled] if m > 1 else [sampled]
            ends = [j for j in range(max(lo, m - 1), hi) if list(tokens[j - m + 1 : j + 1]) == tail]
            if ends:
                return min(ends, key=lambda j: abs(j - expected)) + 1
        return None

    def _longest_match(self, history: npt.NDArray[np.int64], sampled: int) -> int | None:
        """Where the copy goes on after the longest earlier occurrence of the latest tokens (``sampled``
        last), at least ``MIN_SUFFIX_MATCH`` and at most ``size_n`` of them long; the latest of the longest."""
        cur_len = len(history)
        if cur_len < MIN_SUFFIX_MATCH + 1:
            return None
        ends = np.flatnonzero(history[: cur_len - 1] == sampled)  # where an occurrence ends (a token follows)
        length = 1
        while len(ends) and length < self.size_n:
            before = ends[ends >= length]
            matching = before[history[before - length] == history[cur_len - length]]
            if not len(matching):
                break
            ends, length = matching, length + 1
        if length < MIN_SUFFIX_MATCH or not len(ends):
            return None
        return int(ends[-1]) + 1

    def accept(self, n_accepted: int) -> None:
        """The reply copied ``n_accepted`` tokens of the last draft: the copy is expected past them."""
        if self._expected is not None:
            self._expected = self._drafted_from + n_accepted - 1


@dataclass(slots=True)
class _Value:
    start: int  # where this continuation begins in the history
    seen: int = 0
    n_accepted: int = 0


@dataclass(slots=True)
class _Key:
    values: list[_Value] = field(default_factory=list)
    n_drafted: int = 0  # how often the key was looked up with a match (llama-server's key_num)
    counted_to: int = 0  # occurrences before this position are in the values' counts


class NgramMap:
    """``ngram-map-k`` (``key_only``) and ``ngram-map-k4v`` (``common_ngram_map_draft``).

    Keys are the history's ``size_n``-grams that have at least ``size_m`` tokens after them, each recorded
    at the first position indexed (llama-server's hash map keeps the first entry of a slot). A key's draft
    is ``size_m`` tokens after its match, cut to as many as were kept the last time that continuation was
    drafted. ``k4v`` counts the key's different continuations (up to four) and drafts only once the key has
    been seen ``min_hits`` times and its most frequent continuation is at least twice as frequent as the
    others together, and drafts that continuation (llama-server drafts what follows the latest match even
    when another continuation is the dominant one).
    """

    own_acceptance: Acceptance | None = None

    def __init__(self, sizes: NgramSizes, *, key_only: bool) -> None:
        self.size_n, self.size_m, self.min_hits = sizes.size_n, sizes.size_m, sizes.min_hits
        self.key_only = key_only
        self._positions: dict[tuple[int, ...], int] = {}
        self._indexed_to = 0  # positions below this are in ``_positions``
        self._keys: dict[tuple[int, ...], _Key] = {}
        self._last: _Value | None = None

    def draft(self, tokens: Sequence[int], sampled: int) -> list[int]:
        self._last = None
        n, m, cur_len = self.size_n, self.size_m, len(tokens)
        if cur_len < 2 * n + m:
            return []
        key = (*tokens[cur_len - n + 1 :], sampled)
        end = cur_len - n - m - 1  # the last position a key with m tokens after it can start at
        match = self._positions.get(key, 0)
        new = range(end, max(self._indexed_to - 1, 0), -1)  # not indexed yet, latest first
        if not match:
            match = next((j for j in new if tuple(tokens[j : j + n]) == key), 0)
        for j in new:
            self._positions.setdefault(tuple(tokens[j : j + n]), j)
        self._indexed_to = max(self._indexed_to, end + 1)
        if not match:
            return []
        stats = self._keys.setdefault(key, _Key())
        stats.n_drafted += 1
        if self.key_only:
            if not stats.values:
                stats.values.append(_Value(match + n, n_accepted=m))  # what follows the match, always
            value = stats.values[0]
        else:
            if stats.n_drafted < self.min_hits:
                return []
            chosen = self._count_values(stats, tokens, key, match)
            if chosen is None:
                return []
            value = chosen
        self._last = value
        return text_only(tokens[value.start : value.start + min(m, value.n_accepted)])

    def _count_values(self, stats: _Key, tokens: Sequence[int], key: tuple[int, ...], match: int) -> _Value | None:
        """Count the continuations of ``key`` up to ``match``; the dominant one, or None if none dominates."""
        n, m = self.size_n, self.size_m
        for i in range(stats.counted_to, match + 1):
            if tuple(tokens[i : i + n]) != key:
                continue
            after = tokens[i + n : i + n + m]
            value = next((v for v in stats.values if tokens[v.start : v.start + m] == after), None)
            if value is None and len(stats.values) < MAX_VALUES:
                value = _Value(i + n, n_accepted=m)
                stats.values.append(value)
            if value is not None:
                value.seen += 1
        stats.counted_to = match
        best = max(stats.values, key=lambda v: v.seen, default=None)
        if best is None:
            return None
        others = sum(v.seen for v in stats.values if v is not best)
        return None if others > 0 and best.seen < 2 * others else best

    def accept(self, n_accepted: int) -> None:
        if self._last is not None:
            self._last.n_accepted = n_accepted
