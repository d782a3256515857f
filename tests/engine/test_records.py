"""The records between the chat layer and the engine: sampling settings, timings as llama-server reports them."""

from __future__ import annotations

from lfmserve.engine.records import SAMPLING_NAMES, SamplingParams, Timings


def test_updated_replaces_the_given_fields_and_skips_unknown_and_none() -> None:
    params = SamplingParams().updated({"temperature": 0.1, "top_k": None, "stream": True})
    assert (params.temperature, params.top_k) == (0.1, 40)
    assert params.updated({"logit_bias": ((5, -1.0),)}).to_json()["logit_bias"] == [{"bias": -1.0, "token": 5}]


def test_ignore_eos_shows_the_end_of_generation_bans_after_the_requests_biases() -> None:
    """llama-server appends a -inf bias per end-of-generation token (id order) and writes -inf as null."""
    params = SamplingParams(logit_bias=((9, 2.0), (4, float("-inf"))), ignore_eos=True)
    assert params.applied_logit_bias({7, 2}) == ((9, 2.0), (4, float("-inf")), (2, float("-inf")), (7, float("-inf")))
    assert params.to_json({7, 2})["logit_bias"] == [
        {"bias": 2.0, "token": 9},
        {"bias": None, "token": 4},
        {"bias": None, "token": 2},
        {"bias": None, "token": 7},
    ]
    assert SamplingParams(logit_bias=((9, 2.0),)).applied_logit_bias({7, 2}) == ((9, 2.0),)


def test_greedy_is_a_temperature_of_zero_or_less() -> None:
    assert [SamplingParams(temperature=t).is_greedy for t in (-1.0, 0.0, 0.01)] == [True, True, False]


def test_the_sampling_names_are_the_fields() -> None:
    assert sorted(SAMPLING_NAMES) == sorted(SamplingParams().to_json())


def test_timings_report_rates_and_zero_when_nothing_ran() -> None:
    # 21 tokens in 400 ms from the first to the last: 20 decode steps (the first token came with the prompt)
    assert Timings(cache_n=3, prompt_n=50, prompt_ms=100.0, predicted_n=21, predicted_ms=400.0).to_json() == {
        "cache_n": 3,
        "prompt_n": 50,
        "prompt_ms": 100.0,
        "prompt_per_token_ms": 2.0,
        "prompt_per_second": 500.0,
        "predicted_n": 21,
        "predicted_ms": 400.0,
        "predicted_per_token_ms": 20.0,
        "predicted_per_second": 50.0,
    }
    empty = Timings().to_json()
    assert (empty["prompt_per_token_ms"], empty["prompt_per_second"], empty["predicted_per_second"]) == (0.0, 0.0, 0.0)
    one = Timings(predicted_n=1, predicted_ms=0.0).to_json()
    assert (one["predicted_per_token_ms"], one["predicted_per_second"]) == (0.0, 0.0)
