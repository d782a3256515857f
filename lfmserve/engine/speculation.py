"""Speculative decoding's drafts: tokens guessed from the request's own history, verified in the step's batch.

On a CPU, decoding is memory-bound: one token costs a pass over the weights, and checking a few guessed
tokens in the same batch costs little more. A request that copies from its prompt (a summary that quotes,
JSON over a described scene, a document repeated with fixes) repeats runs of tokens it has seen, so the
continuation of the last place its latest tokens occurred is a good guess. The batch step decodes the
pending token and the draft together; the generation samples each position in turn and keeps the drafted
tokens while they are what it samples, so the output is the one decoding without a draft gives.

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


def next_draft_limit(accepted: int, drafted: int, ceiling: int) -> int:
    """The next draft's length for a slot: twice the last after a draft kept whole, else what was kept and one
    more. A rejected token costs a verified position; a slot copying its prompt keeps drafting long."""
    return min(ceiling, 2 * drafted) if accepted == drafted else accepted + 1


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
