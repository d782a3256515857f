"""llama.cpp's sampler chain, each sampler built with the arguments llama-server gives it.

Which stages a request needs, and in what order, is the engine's choice (:mod:`lfmserve.engine.sampling`): logit
bias, the penalties that come first and grammars are applied there to the logits themselves, and greedy sampling
needs no chain at all.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

import llama_cpp.llama_cpp as llama
import numpy as np
import numpy.typing as npt

from ..errors import EngineError
from .context import NativeContext
from .model import NativeModel

#: ``llama_token_data``: a candidate token for the samplers.
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class ChainSettings(Protocol):
    """The settings the chain reads (:class:`~lfmserve.engine.records.SamplingParams` has them)."""

    @property
    def temperature(self) -> float: ...
    @property
    def dynatemp_range(self) -> float: ...
    @property
    def dynatemp_exponent(self) -> float: ...
    @property
    def top_k(self) -> int: ...
    @property
    def top_p(self) -> float: ...
    @property
    def min_p(self) -> float: ...
    @property
    def top_n_sigma(self) -> float: ...
    @property
    def xtc_probability(self) -> float: ...
    @property
    def xtc_threshold(self) -> float: ...
    @property
    def typical_p(self) -> float: ...
    @property
    def repeat_penalty(self) -> float: ...
    @property
    def presence_penalty(self) -> float: ...
    @property
    def frequency_penalty(self) -> float: ...
    @property
    def dry_multiplier(self) -> float: ...
    @property
    def dry_base(self) -> float: ...
    @property
    def dry_allowed_length(self) -> int: ...
    @property
    def dry_penalty_last_n(self) -> int: ...
    @property
    def dry_sequence_breakers(self) -> tuple[str, ...]: ...
    @property
    def mirostat(self) -> int: ...
    @property
    def mirostat_tau(self) -> float: ...
    @property
    def mirostat_eta(self) -> float: ...
    @property
    def adaptive_target(self) -> float: ...
    @property
    def adaptive_decay(self) -> float: ...
    @property
    def min_keep(self) -> int: ...
    @property
    def seed(self) -> int: ...


class SamplerChain:
    """One request's native chain, built from ``stages`` in order: llama-server's sampler names (as
    :mod:`lfmserve.sampler_order` spells them), then what picks the token: ``dist``, ``adaptive_p``, or
    ``mirostat`` (temperature then Mirostat ``settings.mirostat``, as llama-server builds it).

    ``penalty_last_n`` is the penalty window in tokens (the context for -1, resolved by the caller).
    """

    def __init__(
        self, settings: ChainSettings, model: NativeModel, stages: Sequence[str], *, penalty_last_n: int
    ) -> None:
        self._n_vocab = model.n_vocab
        self._chain = llama.llama_sampler_chain_init(llama.llama_sampler_chain_default_params())
        try:
            for stage in stages:
                for build in _stage(stage, settings, model, penalty_last_n):
                    llama.llama_sampler_chain_add(self._chain, build())  # the chain owns each as it is built
        except Exception:
            self.close()  # frees the samplers built so far with the chain
            raise

    def accept(self, token: int) -> None:
        """Tell the chain a token it did not sample (the prompt's, for its penalty windows; a forced one)."""
        llama.llama_sampler_accept(self._chain, token)

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
        kept = _kept(candidates, array)
        token = int(kept["id"][array.selected])
        llama.llama_sampler_accept(self._chain, token)
        return token, kept

    def close(self) -> None:
        if self._chain:
            llama.llama_sampler_free(self._chain)
            self._chain = None


def _kept(candidates: npt.NDArray[np.void], array: Any) -> npt.NDArray[np.void]:
    """The candidates ``array`` holds once the samplers have shrunk and reordered it in place (XTC also moves its
    start past the tokens it drops), checked to lie inside ``candidates`` with the selected one among them: numpy
    would otherwise slice, or index from the end, quietly."""
    start = (ctypes.cast(array.data, ctypes.c_void_p).value or 0) - candidates.ctypes.data
    first, misaligned = divmod(start, TOKEN_DATA.itemsize)
    if misaligned or first < 0 or first + array.size > len(candidates) or not 0 <= array.selected < array.size:
        raise EngineError(
            f"the sampler chain left {array.size} candidates from byte {start}, selected {array.selected}: "
            f"not among the {len(candidates)} it was given"
        )
    return candidates[first : first + array.size]


def _stage(name: str, s: ChainSettings, model: NativeModel, penalty_last_n: int) -> list[Callable[[], Any]]:
    """What builds each native sampler of one stage, with llama-server's arguments (``common/sampling.cpp``):
    built one at a time, each added to the chain before the next, so that a failure leaves none unowned."""
    seed = llama.LLAMA_DEFAULT_SEED if s.seed < 0 else s.seed & 0xFFFFFFFF
    if name == "penalties":
        penalties = (penalty_last_n, s.repeat_penalty, s.frequency_penalty, s.presence_penalty)
        return [partial(llama.llama_sampler_init_penalties, model.n_vocab, *penalties)]
    if name == "dry":
        breakers = [text.encode() for text in s.dry_sequence_breakers]
        array = (ctypes.c_char_p * len(breakers))(*breakers)
        dry = (s.dry_multiplier, s.dry_base, s.dry_allowed_length, s.dry_penalty_last_n, array, len(breakers))
        return [partial(llama.llama_sampler_init_dry, model.vocab_handle, *dry)]
    if name == "infill":
        return [partial(llama.llama_sampler_init_infill, model.vocab_handle)]
    if name == "mirostat":
        picker = (
            partial(llama.llama_sampler_init_mirostat, model.n_vocab, seed, s.mirostat_tau, s.mirostat_eta, 100)
            if s.mirostat == 1
            else partial(llama.llama_sampler_init_mirostat_v2, seed, s.mirostat_tau, s.mirostat_eta)
        )
        return [partial(llama.llama_sampler_init_temp, s.temperature), picker]
    builders: dict[str, Callable[[], Any]] = {
        "top_n_sigma": lambda: llama.llama_sampler_init_top_n_sigma(s.top_n_sigma),
        "top_k": lambda: llama.llama_sampler_init_top_k(s.top_k),
        "typ_p": lambda: llama.llama_sampler_init_typical(s.typical_p, s.min_keep),
        "top_p": lambda: llama.llama_sampler_init_top_p(s.top_p, s.min_keep),
        "min_p": lambda: llama.llama_sampler_init_min_p(s.min_p, s.min_keep),
        "xtc": lambda: llama.llama_sampler_init_xtc(s.xtc_probability, s.xtc_threshold, s.min_keep, seed),
        "temperature": lambda: llama.llama_sampler_init_temp_ext(s.temperature, s.dynatemp_range, s.dynatemp_exponent),
        "adaptive_p": lambda: llama.llama_sampler_init_adaptive_p(s.adaptive_target, s.adaptive_decay, seed),
        "dist": lambda: llama.llama_sampler_init_dist(seed),
    }
    return [builders[name]]
