"""The chain llama-server would build for a request: which samplers act, in what order, and what each changes.

Logits are written by hand so each expected token follows from the sampler's rule (the comments work it out).
"""

from __future__ import annotations

import numpy as np
import pytest

from lfmserve.engine.records import SamplingParams
from lfmserve.engine.sampling import ChainPlan, Sampler, plan_chain
from lfmserve.llama.model import NativeModel

#: Everything off but what a test turns on; temperature 0 makes the chain's last step an argmax.
PLAIN = SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, seed=5)


@pytest.mark.parametrize(
    ("params", "plan"),
    [
        (SamplingParams(), ChainPlan(True, ("top_k", "top_p", "min_p", "temperature", "dist"))),
        (SamplingParams(temperature=0.0), ChainPlan(True, ())),
        (PLAIN.updated({"top_n_sigma": 1.0, "top_k": 3}), ChainPlan(True, ())),
        (
            PLAIN.updated({"xtc_probability": 0.5}),
            ChainPlan(True, ("xtc", "temperature", "dist")),
        ),
        (PLAIN.updated({"xtc_probability": 0.5, "xtc_threshold": 0.6}), ChainPlan(True, ())),
        (PLAIN.updated({"xtc_probability": 0.5, "samplers": ("temperature", "xtc")}), ChainPlan(False, ())),
        (PLAIN.updated({"dynatemp_range": 0.5}), ChainPlan(True, ("temperature", "dist"))),
        (PLAIN.updated({"typical_p": 0.9}), ChainPlan(True, ("typ_p", "temperature", "dist"))),
        (PLAIN.updated({"dry_multiplier": 0.8}), ChainPlan(True, ("dry", "temperature", "dist"))),
        (PLAIN.updated({"dry_multiplier": 0.8, "dry_penalty_last_n": 0}), ChainPlan(True, ())),
        (PLAIN.updated({"samplers": ("top_k", "min_p")}), ChainPlan(False, ("dist",))),
        (
            PLAIN.updated({"repeat_penalty": 1.1, "samplers": ("top_k", "penalties", "temperature")}),
            ChainPlan(False, ("penalties", "temperature", "dist")),
        ),
        (
            SamplingParams(samplers=("temperature", "adaptive_p", "top_k")),
            ChainPlan(False, ("temperature", "top_k", "adaptive_p")),
        ),
        (SamplingParams(mirostat=2, repeat_penalty=1.3), ChainPlan(False, ("mirostat",))),
    ],
    ids=[
        "default",
        "greedy",
        "greedy keeps the top",
        "xtc before temperature",
        "xtc off above 0.5",
        "xtc after temperature",
        "dynamic temperature",
        "typical",
        "dry",
        "dry without a window",
        "no temperature",
        "penalties later",
        "adaptive-p picks",
        "mirostat",
    ],
)
def test_the_plan_has_the_samplers_that_act_in_the_requests_order(params: SamplingParams, plan: ChainPlan) -> None:
    assert plan_chain(params) == plan


def pick(model: NativeModel, params: SamplingParams, history: tuple[int, ...], top: dict[int, float]) -> int:
    """The token sampled from logits that are 0 but for ``top``."""
    logits = np.zeros(model.n_vocab, dtype=np.float32)
    for token, logit in top.items():
        logits[token] = logit
    sampler = Sampler(model, params, history, 256)
    try:
        return sampler.sample(None, -1, logits)  # type: ignore[arg-type]
    finally:
        sampler.close()


def test_dry_penalises_the_token_that_extends_a_repeat_of_the_prompt(model: NativeModel) -> None:
    """History 5 6 7 5 6: 7 would repeat "5 6 7", a match of 2 tokens. With allowed length 1 its penalty is
    multiplier * base ^ (2 - 1) = 10 * 2 = 20, so 7 (10.0) falls below 8 (9.0)."""
    dry = PLAIN.updated({"dry_multiplier": 10.0, "dry_base": 2.0, "dry_allowed_length": 1})
    top = {7: 10.0, 8: 9.0}
    assert pick(model, PLAIN, (5, 6, 7, 5, 6), top) == 7
    assert pick(model, dry, (5, 6, 7, 5, 6), top) == 8
    assert pick(model, dry, (5, 6, 9, 5, 6), top) == 7  # no repeat ends in 7
    assert pick(model, dry.updated({"dry_penalty_last_n": 2}), (5, 6, 7, 5, 6), top) == 7  # out of the window


def test_xtc_drops_every_likely_token_but_the_least_likely_of_them(model: NativeModel) -> None:
    """Softmax of 10, 9.9 and zeros: about 0.52 and 0.47, both over the 0.1 threshold, so XTC (chance 1) keeps 3."""
    xtc = PLAIN.updated({"xtc_probability": 1.0, "xtc_threshold": 0.1})
    top = {9: 10.0, 3: 9.9}
    assert (pick(model, PLAIN, (), top), pick(model, xtc, (), top)) == (9, 3)
    assert pick(model, xtc.updated({"samplers": ("temperature", "xtc")}), (), top) == 9  # after greedy: one left


def test_the_order_decides_what_the_penalties_see(model: NativeModel) -> None:
    """History 9; repeat penalty 4 makes 9's 10.0 a 2.5. Penalties first, top-k 1 keeps 3; top-k first keeps 9
    alone, which the penalties cannot displace; with no penalties in the order, nothing is penalised."""
    params = PLAIN.updated({"repeat_penalty": 4.0, "top_k": 1})
    top = {9: 10.0, 3: 9.5, 4: 9.4}
    assert pick(model, params, (9,), top) == 3
    assert pick(model, params.updated({"samplers": ("top_k", "penalties", "temperature")}), (9,), top) == 9
    assert pick(model, params.updated({"samplers": ("top_k", "temperature")}), (9,), top) == 9
    assert pick(model, params.updated({"top_k": 0, "samplers": ("temperature", "penalties")}), (9,), top) == 9


def test_mirostat_replaces_the_chain_and_its_penalties(model: NativeModel) -> None:
    """llama-server's Mirostat chain is temperature then Mirostat: at temperature 0 one token is left, the top one,
    and the repeat penalty the default order would apply first is not applied."""
    params = PLAIN.updated({"repeat_penalty": 4.0})
    top = {9: 10.0, 3: 9.5}
    assert pick(model, params, (9,), top) == 3
    assert pick(model, params.updated({"mirostat": 1}), (9,), top) == 9
    assert pick(model, params.updated({"mirostat": 2}), (9,), top) == 9


def test_a_forced_token_enters_the_chains_window(model: NativeModel) -> None:
    """A token written for the model (a reasoning budget's end) counts as sampled: DRY sees it in the repeat."""
    dry = PLAIN.updated({"dry_multiplier": 10.0, "dry_base": 2.0, "dry_allowed_length": 1})
    sampler = Sampler(model, dry, (5, 6, 7, 5), 256)
    try:
        sampler.sample(None, -1, np.zeros(model.n_vocab, dtype=np.float32), force=6)  # type: ignore[arg-type]
        logits = np.zeros(model.n_vocab, dtype=np.float32)
        logits[7], logits[8] = 10.0, 9.0
        assert sampler.sample(None, -1, logits) == 8  # type: ignore[arg-type]
    finally:
        sampler.close()
