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

from .config import NgramSizes

#: ``ngram-map-k4v``: the different continuations remembered per key.
MAX_VALUES = 4


class Drafter(Protocol):
    """One generation's drafter: guesses, then hears how many of its last guess were kept."""

    def draft(self, tokens: Sequence[int], sampled: int) -> list[int]: ...

    def accept(self, n_accepted: int) -> None: ...


def text_only(draft: Sequence[int]) -> list[int]:
    """``draft`` up to its first media position."""
    for i, token in enumerate(draft):
        if token < 0:
            return [int(t) for t in draft[:i]]
    return [int(t) for t in draft]


class NgramSimple:
    """``ngram-simple`` (``common_ngram_simple_draft``): the latest earlier occurrence of the pattern, and up
    to ``size_m`` tokens after it (none when fewer than ``size_n`` follow)."""

    def __init__(self, sizes: NgramSizes) -> None:
        self.size_n = sizes.size_n
        self.size_m = sizes.size_m

    def draft(self, tokens: Sequence[int], sampled: int) -> list[int]:
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
                return text_only(history[start + n : start + n + copy].tolist()) if copy >= n else []
        return []

    def accept(self, n_accepted: int) -> None:
        """Stateless: nothing to learn."""


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
