"""Logit bias and repetition penalties applied in place to one row of logits, in Python.

llama.cpp's penalties sampler looks every one of the vocabulary's candidates up in a hash map of
recent tokens (about 0.2 ms a token for a 65,536-token vocabulary, measured on the benchmark
machine), although only the at most ``repeat_last_n`` tokens of the window change. Every LFM family
default uses a repeat penalty, so lfmserve applies bias and penalties to just those tokens with
numpy, using llama.cpp's formulas in float32 and its order (bias first, then penalties);
tests/test_penalties.py checks the result against llama.cpp's own samplers.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from .records import SamplingParams


class LogitAdjuster:
    def __init__(
        self, params: SamplingParams, *, n_ctx: int, eog_tokens: Iterable[int] = (), with_penalties: bool = True
    ) -> None:
        """``with_penalties`` False: the bias only (the penalties come later in the chain, or not at all)."""
        biases = params.applied_logit_bias(eog_tokens)
        added = [(t, b) for t, b in biases if b != float("-inf")]
        self._bias_ids = np.array([t for t, _ in added], dtype=np.int64)
        with np.errstate(over="ignore"):  # a bias beyond float32's range is infinite, as llama.cpp's float is
            self._bias_values = np.array([b for _, b in added], dtype=np.float32)
        #: Banned tokens (``false``) are set to -inf after the others are added: a ban also listed with a bias
        #: that overflowed to +inf stays banned, where adding the two would give NaN.
        self._banned_ids = np.array(sorted({t for t, b in biases if b == float("-inf")}), dtype=np.int64)
        self.window = n_ctx if params.repeat_last_n < 0 else params.repeat_last_n
        self.penalised = with_penalties and params.penalises
        with np.errstate(over="ignore"):  # a penalty beyond float32's range is infinite, as in llama.cpp
            self._repeat = np.float32(params.repeat_penalty)
            self._frequency = np.float32(params.frequency_penalty)
            self._presence = np.float32(params.presence_penalty)
        self._recent: collections.deque[int] = collections.deque(maxlen=max(self.window, 1))
        self._counts: collections.Counter[int] = collections.Counter()

    @property
    def active(self) -> bool:
        return self.penalised or self._bias_ids.size > 0 or self._banned_ids.size > 0

    def accept(self, token: int) -> None:
        """Add a token to the penalty window (the oldest leaves once it is full)."""
        if not self.penalised:
            return
        if len(self._recent) == self._recent.maxlen:
            old = self._recent[0]
            self._counts[old] -= 1
            if self._counts[old] == 0:
                del self._counts[old]
        self._recent.append(token)
        self._counts[token] += 1

    def apply(self, logits: npt.NDArray[np.float32]) -> None:
        if self._bias_ids.size:
            with np.errstate(over="ignore"):  # biases that sum past float32's range (a token listed twice): inf
                np.add.at(logits, self._bias_ids, self._bias_values)
        if self._banned_ids.size:
            logits[self._banned_ids] = -np.inf
        if self.penalised and self._counts:
            ids = np.fromiter(self._counts.keys(), dtype=np.int64, count=len(self._counts))
            counts = np.fromiter(self._counts.values(), dtype=np.float32, count=len(self._counts))
            selected = logits[ids]
            # Extreme penalties (0, or near float32's limit) give infinities, as llama.cpp's float arithmetic does.
            with np.errstate(all="ignore"):
                selected = np.where(selected <= 0, selected * self._repeat, selected / self._repeat)
                logits[ids] = selected - (counts * self._frequency + self._presence)
