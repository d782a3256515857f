"""Log-probabilities of sampled tokens (the model's, or the sampler chain's), and sampling itself on the tiny model
(greedy is an argmax)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lfmserve.engine.core import Engine
from lfmserve.engine.records import EngineRequest, SamplingParams, TokenLogprob
from lfmserve.engine.sampling import Sampler, kept_logprob, token_logprob
from lfmserve.llama.model import NativeModel
from lfmserve.llama.sampler import TOKEN_DATA
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


def test_kept_logprob_orders_the_kept_by_probability_and_leaves_out_the_zeros() -> None:
    kept = np.array([(4, 0.0, 0.25), (9, 0.0, 0.0), (2, 0.0, 0.5), (7, 0.0, 0.25)], dtype=TOKEN_DATA)
    step = kept_logprob(kept, 7, 10)
    assert step.token == 7 and step.logprob == pytest.approx(math.log(0.25))
    assert [t for t, _ in step.top] == [2, 4, 7]  # ties by id; the token given nothing is not listed
    assert [math.exp(lp) for _, lp in step.top] == pytest.approx([0.5, 0.25, 0.25])
    assert [t for t, _ in kept_logprob(kept, 2, 2).top] == [2, 4]
    assert kept_logprob(None, 5, 10) == TokenLogprob(5, 0.0, ((5, 0.0),))  # greedy: the chosen token, p = 1


def test_post_sampling_probabilities_are_the_chains_after_the_bias(model: NativeModel) -> None:
    """The model's probabilities ignore the bias; the chain's see it, and only the top-k tokens survive."""
    logits = np.linspace(0.0, 3.0, model.n_vocab, dtype=np.float32)
    params = SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0, seed=3, logit_bias=((0, 4.0),))
    sampler = Sampler(model, params, (), 256, n_probs=5, post_sampling=True)
    token = sampler.sample(None, -1, logits.copy())  # type: ignore[arg-type]
    step = sampler.last_logprob
    assert step is not None and step.token == token
    last = model.n_vocab - 1
    assert [t for t, _ in step.top] == [0, last]  # the biased token first, then the most likely one
    gap = 4.0 - 3.0
    assert [math.exp(lp) for _, lp in step.top] == pytest.approx([1 / (1 + math.exp(-gap)), 1 / (1 + math.exp(gap))])
    model_probs = Sampler(model, params, (), 256, n_probs=5)
    model_probs.sample(None, -1, logits.copy())  # type: ignore[arg-type]
    assert model_probs.last_logprob is not None and model_probs.last_logprob.top[0][0] == last


def test_greedy_post_sampling_gives_the_chosen_token_all_the_probability(engine: Engine, model: NativeModel) -> None:
    p = prompt(model, "Hi")
    greedy = SamplingParams(temperature=0.0)
    request = EngineRequest(prompt_tokens=p, sampling=greedy, max_tokens=3, n_probs=4, post_sampling_probs=True)
    steps = [step for out in run(engine, request) for step in out.logprobs]
    assert len(steps) == 3 and all(step == TokenLogprob(step.token, 0.0, ((step.token, 0.0),)) for step in steps)
