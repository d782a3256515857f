"""llama.cpp's sampler chain, in llama-server's order: top-k -> typical -> top-p -> min-p -> temperature -> dist(seed).

Logit bias, penalties and grammars come before it and are applied by the engine to the logits themselves
(:mod:`lfmserve.engine.sampling`); greedy sampling needs no chain at all.
"""

from __future__ import annotations

import ctypes
from typing import Any, Protocol

import llama_cpp.llama_cpp as llama
import numpy as np
import numpy.typing as npt

from .context import NativeContext

#: ``llama_token_data``: a candidate token for the samplers.
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class ChainSettings(Protocol):
    """The settings the chain reads (:class:`~lfmserve.engine.records.SamplingParams` has them)."""

    @property
    def top_k(self) -> int: ...
    @property
    def typical_p(self) -> float: ...
    @property
    def top_p(self) -> float: ...
    @property
    def min_p(self) -> float: ...
    @property
    def temperature(self) -> float: ...
    @property
    def seed(self) -> int: ...


class SamplerChain:
    """One request's chain; samplers left at their "off" value are not added."""

    def __init__(self, settings: ChainSettings, n_vocab: int) -> None:
        self._n_vocab = n_vocab
        self._chain = llama.llama_sampler_chain_init(llama.llama_sampler_chain_default_params())
        for sampler in _samplers(settings):
            llama.llama_sampler_chain_add(self._chain, sampler)

    def sample(self, ctx: NativeContext, batch_index: int) -> int:
        """A token from the logits the last decode left at ``batch_index`` (as adjusted in place)."""
        return int(llama.llama_sampler_sample(self._chain, ctx.handle, batch_index))

    def sample_candidates(self, logits: npt.NDArray[np.float32]) -> tuple[int, npt.NDArray[np.void]]:
        """What :meth:`sample` does, for logits outside the context (kept from an earlier decode, or wanted with
        the candidates): the token, and the candidates the chain kept (``id``, ``logit``, ``p``) with the
        probabilities its last sampler gave them, llama-server's post-sampling probabilities."""
        candidates = np.zeros(self._n_vocab, dtype=TOKEN_DATA)
        candidates["id"] = np.arange(self._n_vocab, dtype=np.int32)
        candidates["logit"] = logits
        array = llama.llama_token_data_array(
            data=candidates.ctypes.data_as(ctypes.POINTER(llama.llama_token_data)),
            size=self._n_vocab,
            selected=-1,
            sorted=False,
        )
        llama.llama_sampler_apply(self._chain, ctypes.byref(array))
        kept = candidates[: array.size]  # the samplers shrink and reorder the array in place
        token = int(kept["id"][array.selected])
        llama.llama_sampler_accept(self._chain, token)
        return token, kept

    def close(self) -> None:
        if self._chain:
            llama.llama_sampler_free(self._chain)
            self._chain = None


def _samplers(settings: ChainSettings) -> list[Any]:
    samplers = []
    if settings.top_k > 0:
        samplers.append(llama.llama_sampler_init_top_k(settings.top_k))
    if settings.typical_p < 1.0:
        samplers.append(llama.llama_sampler_init_typical(settings.typical_p, 1))
    if settings.top_p < 1.0:
        samplers.append(llama.llama_sampler_init_top_p(settings.top_p, 1))
    if settings.min_p > 0.0:
        samplers.append(llama.llama_sampler_init_min_p(settings.min_p, 1))
    samplers.append(llama.llama_sampler_init_temp_ext(settings.temperature, 0.0, 1.0))
    seed = llama.LLAMA_DEFAULT_SEED if settings.seed < 0 else settings.seed & 0xFFFFFFFF
    samplers.append(llama.llama_sampler_init_dist(seed))
    return samplers
