"""llama.cpp's sampler chain: sampling from logits kept outside the context picks what sampling in it picks, and
the candidates it keeps carry the probabilities it sampled from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lfmserve.engine.records import SamplingParams
from lfmserve.engine.sampling import plan_chain
from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel
from lfmserve.llama.sampler import SamplerChain


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
