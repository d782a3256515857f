"""Log-probabilities of sampled tokens, and sampling itself on the tiny model (greedy is an argmax)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lfmserve.engine.core import Engine
from lfmserve.engine.records import EngineRequest, SamplingParams
from lfmserve.engine.sampling import Sampler, token_logprob
from lfmserve.llama.model import NativeModel
from tests.engine.conftest import prompt, run, tokens_of


def test_token_logprob_is_the_log_softmax_with_the_most_likely_first() -> None:
    logits = np.array([1.0, 3.0, 2.0, 3.0], dtype=np.float32)
    log_total = math.log(math.exp(1) + math.exp(3) + math.exp(2) + math.exp(3))
    step = token_logprob(logits, 2, 3)
    assert step.token == 2 and step.logprob == pytest.approx(2 - log_total)
    assert [t for t, _ in step.top] == [1, 3, 2]  # ties by id
    assert [lp for _, lp in step.top] == pytest.approx([3 - log_total, 3 - log_total, 2 - log_total])
    assert [t for t, _ in token_logprob(logits, 0, 10).top] == [1, 3, 2, 0]  # at most the vocabulary


def test_greedy_and_a_one_token_top_k_chain_pick_the_same_tokens(engine: Engine, model: NativeModel) -> None:
    """Greedy takes an argmax without llama.cpp's chain; a chain that can only keep the top token must agree."""
    p = prompt(model, "What is machine learning?")
    greedy = SamplingParams(temperature=0.0)
    chain = SamplingParams(temperature=1.0, top_k=1, seed=7)
    outs = [tokens_of(run(engine, EngineRequest(prompt_tokens=p, sampling=s, max_tokens=12))) for s in (greedy, chain)]
    assert outs[0] == outs[1] and len(outs[0]) == 12


def test_probabilities_are_the_models_before_the_bias(engine: Engine, model: NativeModel) -> None:
    p = prompt(model, "Hi")
    greedy = SamplingParams(temperature=0.0)
    plain = run(engine, EngineRequest(prompt_tokens=p, sampling=greedy, max_tokens=1, n_probs=2))
    favoured = plain[-1].logprobs[0].top[1][0]  # the second most likely token, made the most likely by a bias
    biased = greedy.updated({"logit_bias": ((favoured, 50.0),)})
    out = run(engine, EngineRequest(prompt_tokens=p, sampling=biased, max_tokens=1, n_probs=2))
    assert out[-1].token_ids == (favoured,)
    assert out[-1].logprobs[0].top == plain[-1].logprobs[0].top  # the model's, not the biased ones


def test_media_positions_in_the_prompt_are_not_penalised_tokens(model: NativeModel) -> None:
    """A prompt's media positions hold negative ids (``engine.media``): the penalty window skips them, as
    llama-server skips its media chunks, instead of penalising the tokens at the end of the vocabulary."""
    params = SamplingParams(temperature=0.0, repeat_penalty=2.0, repeat_last_n=8)
    logits = np.linspace(1.0, 2.0, model.n_vocab, dtype=np.float32)
    with_media, text_only = logits.copy(), logits.copy()
    Sampler(model, params, (5, -1, -2, 9, -7), 256).sample(None, -1, with_media)  # type: ignore[arg-type]
    Sampler(model, params, (5, 9), 256).sample(None, -1, text_only)  # type: ignore[arg-type]
    assert np.array_equal(with_media, text_only)
    changed = np.flatnonzero(with_media != logits).tolist()
    assert changed == [5, 9]
