"""llama.cpp's sampler chain: sampling from logits kept outside the context picks what sampling in it picks, and
the candidates it keeps carry the probabilities it sampled from."""

from __future__ import annotations

import ctypes
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import llama_cpp.llama_cpp as llama
import numpy as np
import pytest

from lfmserve.engine.records import SamplingParams
from lfmserve.engine.sampling import plan_chain
from lfmserve.errors import EngineError
from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel
from lfmserve.llama.sampler import TOKEN_DATA, SamplerChain

#: A model as the chain reads it: only its vocabulary's size (and a handle the stand-in samplers ignore).
VOCAB_OF_8: Any = SimpleNamespace(n_vocab=8, vocab_handle=None)


def chain_of(params: SamplingParams, model: NativeModel) -> SamplerChain:
    return SamplerChain(params, model, plan_chain(params).stages, penalty_last_n=params.repeat_last_n)


def test_sampling_kept_logits_equals_sampling_in_the_context(tiny_gguf: Path) -> None:
    model = NativeModel(tiny_gguf)
    ctx = NativeContext(model, n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1, n_threads=1, n_threads_batch=1)
    try:
        index = ctx.batch.add([1, 6, 100, 101], 0, 0, True)
        ctx.decode()
        kept = ctx.logits(index).copy()
        settings = [SamplingParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=seed) for seed in range(6)] + [
            SamplingParams(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, typical_p=0.8, seed=3),
            # XTC moves the array's start past what it drops; Mirostat and adaptive-p pick on their own.
            SamplingParams(
                temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, xtc_probability=1.0, xtc_threshold=0.001, seed=2
            ),
            SamplingParams(temperature=1.2, mirostat=1, seed=4),
            SamplingParams(temperature=1.2, mirostat=2, seed=4),
            SamplingParams(temperature=1.0, top_n_sigma=2.0, dynatemp_range=0.5, seed=9),
            SamplingParams(
                temperature=1.0, adaptive_target=0.3, samplers=("top_k", "temperature", "adaptive_p"), seed=1
            ),
        ]
        picks = []
        for params in settings:
            in_context, outside = chain_of(params, model), chain_of(params, model)
            picks.append((in_context.sample(ctx, index), outside.sample_candidates(kept.copy())[0]))
            in_context.close()
            outside.close()
        assert all(a == b for a, b in picks)
        assert len({a for a, _ in picks[:6]}) > 1  # the seeds matter: a chain that ignored them would show
    finally:
        ctx.close()
        model.close()


def test_the_candidates_kept_are_the_top_k_with_the_softmax_of_their_logits(tiny_gguf: Path) -> None:
    """What llama-server reports as post-sampling probabilities: the chain's survivors, as ``dist`` weighed them."""
    model = NativeModel(tiny_gguf, vocab_only=True)
    try:
        logits = np.linspace(-2.0, 2.0, model.n_vocab, dtype=np.float32)
        params = SamplingParams(temperature=0.5, top_k=3, top_p=1.0, min_p=0.0, seed=11)
        chain = chain_of(params, model)
        token, kept = chain.sample_candidates(logits.copy())
        top = np.argsort(logits)[-3:]
        assert sorted(kept["id"].tolist()) == sorted(top.tolist()) and token in kept["id"]
        expected = np.exp((logits[kept["id"]] - logits[top].max()) / 0.5)
        assert kept["p"] == pytest.approx(expected / expected.sum(), rel=1e-5)
        chain.close()
    finally:
        model.close()


#: Every stage, and the ``llama_sampler_init_*`` each builds, in the order built (Mirostat 2: temperature first).
EVERY_STAGE = ("penalties", "dry", "infill", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc")
EVERY_STAGE += ("temperature", "mirostat", "adaptive_p", "dist")
INITS = ("penalties", "dry", "infill", "top_n_sigma", "top_k", "typical", "top_p", "min_p", "xtc", "temp_ext")
INITS += ("temp", "mirostat_v2", "adaptive_p", "dist")


class LiveSamplers:
    """Stand-ins for llama.cpp's samplers, each freed through an interface that counts it: how many are alive
    (freeing a chain frees its samplers in C, out of Python's sight)."""

    def __init__(self) -> None:
        self.built = self.alive = 0
        self._free = llama.llama_sampler_i_free(self._freed)
        self._iface = llama.llama_sampler_i(free=self._free)

    def _freed(self, _sampler: object) -> None:
        self.alive -= 1

    def build(self, *_args: object) -> object:
        self.built += 1
        self.alive += 1
        return llama.llama_sampler_init(ctypes.byref(self._iface), None)


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> LiveSamplers:
    """Every ``llama_sampler_init_*`` a stage calls, replaced by a counted stand-in."""
    samplers = LiveSamplers()
    for name in INITS:
        monkeypatch.setattr(llama, f"llama_sampler_init_{name}", samplers.build)
    return samplers


def test_a_chain_frees_every_sampler_it_built(live: LiveSamplers) -> None:
    chain = SamplerChain(SamplingParams(mirostat=2), VOCAB_OF_8, EVERY_STAGE, penalty_last_n=64)
    assert (live.built, live.alive) == (len(INITS), len(INITS))
    chain.close()
    assert live.alive == 0


@pytest.mark.parametrize("failing", INITS)
def test_a_sampler_that_fails_to_build_leaves_none_alive(
    failing: str, live: LiveSamplers, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*_args: object) -> None:
        raise ctypes.ArgumentError(f"{failing}: out of range")

    monkeypatch.setattr(llama, f"llama_sampler_init_{failing}", fail)
    with pytest.raises(ctypes.ArgumentError, match=f"^{failing}: out of range$"):
        SamplerChain(SamplingParams(mirostat=2), VOCAB_OF_8, EVERY_STAGE, penalty_last_n=64)
    assert (live.built, live.alive) == (INITS.index(failing), 0)


def leave(start_bytes: int, size: int, selected: int) -> Any:
    """A ``llama_sampler_apply`` that leaves the candidate array ``start_bytes`` into the candidates, ``size``
    long, with ``selected`` picked."""

    def apply(_chain: object, array_ref: Any) -> None:
        array = array_ref._obj
        start = ctypes.cast(array.data, ctypes.c_void_p).value + start_bytes
        array.data = ctypes.cast(start, ctypes.POINTER(llama.llama_token_data))
        array.size, array.selected = size, selected

    return apply


def test_the_candidates_kept_are_the_slice_the_chain_left(monkeypatch: pytest.MonkeyPatch) -> None:
    chain = SamplerChain(SamplingParams(seed=1), VOCAB_OF_8, ("dist",), penalty_last_n=64)
    monkeypatch.setattr(llama, "llama_sampler_apply", leave(2 * TOKEN_DATA.itemsize, 3, 1))
    try:
        token, kept = chain.sample_candidates(np.zeros(8, dtype=np.float32))
        assert (token, kept["id"].tolist()) == (3, [2, 3, 4])
    finally:
        chain.close()


@pytest.mark.parametrize(
    ("start_bytes", "size", "selected"),
    [
        (8 * TOKEN_DATA.itemsize, 1, 0),  # past the end
        (0, 9, 0),  # longer than the candidates
        (-TOKEN_DATA.itemsize, 1, 0),  # before the start
        (4, 1, 0),  # inside a candidate
        (0, 8, -1),  # none selected
        (0, 3, 3),  # selected past the kept ones
    ],
)
def test_candidates_left_outside_the_array_are_an_error(
    start_bytes: int, size: int, selected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = SamplerChain(SamplingParams(seed=1), VOCAB_OF_8, ("dist",), penalty_last_n=64)
    monkeypatch.setattr(llama, "llama_sampler_apply", leave(start_bytes, size, selected))
    try:
        with pytest.raises(EngineError) as raised:
            chain.sample_candidates(np.zeros(8, dtype=np.float32))
        assert str(raised.value) == (
            f"the sampler chain left {size} candidates from byte {start_bytes}, selected {selected}: "
            "not among the 8 it was given"
        )
    finally:
        chain.close()
