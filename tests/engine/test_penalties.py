"""LogitAdjuster gives bit-for-bit the logits llama.cpp's logit-bias and penalties samplers give."""

from __future__ import annotations

import ctypes
import warnings

import llama_cpp.llama_cpp as llama
import numpy as np
import pytest

from lfmserve.engine.penalties import LogitAdjuster
from lfmserve.engine.records import SamplingParams

N_VOCAB = 1000


def llama_reference(logits: np.ndarray, params: SamplingParams, history: list[int]) -> np.ndarray:
    chain = llama.llama_sampler_chain_init(llama.llama_sampler_chain_default_params())
    if params.logit_bias:
        biases = (llama.llama_logit_bias * len(params.logit_bias))(
            *[llama.llama_logit_bias(t, b) for t, b in params.logit_bias]
        )
        llama.llama_sampler_chain_add(
            chain, llama.llama_sampler_init_logit_bias(N_VOCAB, len(params.logit_bias), biases)
        )
    llama.llama_sampler_chain_add(
        chain,
        llama.llama_sampler_init_penalties(
            N_VOCAB, params.repeat_last_n, params.repeat_penalty, params.frequency_penalty, params.presence_penalty
        ),
    )
    for token in history:
        llama.llama_sampler_accept(chain, token)
    data = (llama.llama_token_data * N_VOCAB)(*[llama.llama_token_data(i, float(x), 0.0) for i, x in enumerate(logits)])
    array = llama.llama_token_data_array(
        data=ctypes.cast(data, llama.llama_token_data_p), size=N_VOCAB, selected=-1, sorted=False
    )
    llama.llama_sampler_apply(chain, ctypes.byref(array))
    out = np.empty(N_VOCAB, dtype=np.float32)
    for i in range(array.size):
        out[array.data[i].id] = array.data[i].logit
    llama.llama_sampler_free(chain)
    return out


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(repeat_penalty=1.05, repeat_last_n=64),
        SamplingParams(repeat_penalty=1.3, repeat_last_n=8, frequency_penalty=0.4, presence_penalty=-0.7),
        SamplingParams(
            repeat_penalty=1.1, repeat_last_n=16, logit_bias=((5, 2.5), (9, -1.0), (5, 0.5), (3, float("-inf")))
        ),
        SamplingParams(repeat_penalty=0.0, repeat_last_n=64),  # llama.cpp divides by it: positive logits go infinite
        SamplingParams(repeat_penalty=2e37, repeat_last_n=64),  # negative logits times it overflow float32
    ],
)
def test_matches_llama_cpp_exactly(params: SamplingParams) -> None:
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal(N_VOCAB) * 4).astype(np.float32)
    history = [int(t) for t in rng.integers(0, 40, size=200)]
    adjuster = LogitAdjuster(params, n_ctx=4096)
    for token in history:
        adjuster.accept(token)
    ours = logits.copy()
    adjuster.apply(ours)
    np.testing.assert_array_equal(ours, llama_reference(logits, params, history))


def test_ignore_eos_bans_end_of_generation_tokens() -> None:
    adjuster = LogitAdjuster(SamplingParams(ignore_eos=True), n_ctx=64, eog_tokens=[2, 7])
    logits = np.zeros(10, dtype=np.float32)
    adjuster.apply(logits)
    assert np.isneginf(logits[[2, 7]]).all() and (logits[[0, 1, 3]] == 0).all()


def test_biases_past_float32s_range_become_infinite_without_a_warning() -> None:
    params = SamplingParams(logit_bias=((3, 3e38), (3, 3e38), (4, 1e39)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adjuster = LogitAdjuster(params, n_ctx=64)
        logits = np.zeros(8, dtype=np.float32)
        adjuster.apply(logits)
    assert logits[3] == np.inf and logits[4] == np.inf and logits[0] == 0.0


def test_a_banned_token_also_given_a_bias_that_overflows_stays_banned() -> None:
    # The fuzzer's {"::": 1.7e38, ":": false}: "::" is ":" twice, whose biases sum past float32's range to +inf,
    # and inf + -inf would be NaN (a 500 from numpy's invalid-value check).
    params = SamplingParams(logit_bias=((5, 1.7e38), (5, 1.7e38), (5, float("-inf")), (6, 1.0)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adjuster = LogitAdjuster(params, n_ctx=64)
        logits = np.zeros(8, dtype=np.float32)
        adjuster.apply(logits)
    assert logits[5] == -np.inf and logits[6] == 1.0 and logits[0] == 0.0
