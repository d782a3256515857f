"""Speculative decoding over HTTP, reported as llama-server reports it: ``timings.draft_n`` and
``draft_n_accepted`` (only when something was drafted), ``/props`` ``params["speculative.types"]``,
``/slots[].speculative``, the ``spec_decode_*`` counters of ``/metrics``; lfmserve's ``/props`` fields saying how
drafts are verified (``--spec-exact`` or, by default, as llama-server); and per-request control."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.settings import Settings
from tests.conftest import ServerThread, post


@pytest.fixture(scope="module")
def speculative(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    settings = Settings.of(
        model=str(tiny_gguf),
        ctx_size=1024,
        parallel=1,
        threads=1,
        metrics=True,
        spec_type="ngram-simple",
        spec_ngram_simple_size_n=1,  # the random model gets drafts often (it rejects nearly all of them)
        spec_ngram_simple_size_m=6,
    )
    return server_factory(settings)


PROMPT = "Tell me a story about a cat and a dog that lived in a small house near the river. Once upon a time"
BODY: dict[str, Any] = {"prompt": PROMPT, "n_predict": 64, "temperature": 0, "ignore_eos": True}


def _metrics(server: ServerThread) -> dict[str, float]:
    lines = httpx.get(server.url + "/metrics").text.splitlines()
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in lines if line.startswith("llamacpp:spec")}


def test_timings_props_slots_and_metrics_report_the_drafts(speculative: ServerThread) -> None:
    before = _metrics(speculative)
    reply = post(speculative, "/completion", BODY).json()
    timings = reply["timings"]
    assert timings["draft_n"] > 0 and 0 <= timings["draft_n_accepted"] <= timings["draft_n"]
    after = _metrics(speculative)
    drafted = (
        after["llamacpp:spec_decode_num_draft_tokens_total"] - before["llamacpp:spec_decode_num_draft_tokens_total"]
    )
    assert drafted == timings["draft_n"]
    accepted = after["llamacpp:spec_decode_num_accepted_tokens_total"]
    assert accepted - before["llamacpp:spec_decode_num_accepted_tokens_total"] == timings["draft_n_accepted"]
    assert after["llamacpp:spec_decode_num_drafts_total"] > before["llamacpp:spec_decode_num_drafts_total"]
    props = httpx.get(speculative.url + "/props").json()
    assert props["default_generation_settings"]["params"]["speculative.types"] == "ngram-simple"
    assert [slot["speculative"] for slot in httpx.get(speculative.url + "/slots").json()] == [True]


def _verification(server: ServerThread) -> tuple[Any, ...]:
    params = httpx.get(server.url + "/props").json()["default_generation_settings"]["params"]
    return tuple(params[f"speculative.{name}"] for name in ("types", "exact", "exact_batch", "drafting"))


def test_by_default_drafts_are_verified_as_llama_server_verifies_them(
    speculative: ServerThread, tiny_server: ServerThread
) -> None:
    assert _verification(speculative) == ("ngram-simple", False, None, True)
    assert _verification(tiny_server) == ("none", False, None, False)


def test_spec_exact_reports_what_it_measured_and_says_it_in_one_line(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The tiny model's F32 kernels compute no batch of 2 as two single decodes: ``--spec-exact`` verifies no
    draft, so nothing drafts, and the start line says so."""
    settings = Settings.of(
        model=str(tiny_gguf), ctx_size=1024, parallel=1, threads=1, spec_type="ngram-simple", spec_exact=True
    )
    with caplog.at_level(logging.INFO, logger="lfmserve.engine"):
        exact = server_factory(settings)
    assert [record.getMessage() for record in caplog.records if record.name == "lfmserve.engine.core"] == [
        "speculative decoding is off: with --spec-exact, llama.cpp's kernels here compute no batch of 2 tokens or "
        "more as they compute each token alone (without --spec-exact, drafts are verified in batches of any size, "
        "as llama-server does; near ties can then go either way)"
    ]
    assert _verification(exact) == ("ngram-simple", True, 1, False)
    assert "draft_n" not in post(exact, "/completion", BODY).json()["timings"]


@pytest.mark.parametrize("control", [{"speculative": False}, {"speculative.n_max": 0}])
def test_a_request_turns_speculation_off_and_gets_the_same_tokens(
    speculative: ServerThread, control: dict[str, Any]
) -> None:
    on = post(speculative, "/completion", {**BODY, "cache_prompt": False}).json()
    off = post(speculative, "/completion", {**BODY, "cache_prompt": False, **control}).json()
    assert "draft_n" not in off["timings"] and "draft_n_accepted" not in off["timings"]
    assert off["content"] == on["content"] and off["tokens_predicted"] == on["tokens_predicted"] == 64


def test_a_server_without_speculation_reports_none(tiny_server: ServerThread) -> None:
    props = httpx.get(tiny_server.url + "/props").json()
    assert props["default_generation_settings"]["params"]["speculative.types"] == "none"
    assert {slot["speculative"] for slot in httpx.get(tiny_server.url + "/slots").json()} == {False}
    assert "draft_n" not in post(tiny_server, "/completion", BODY).json()["timings"]


def test_a_negative_draft_cap_is_a_400(speculative: ServerThread) -> None:
    reply = post(speculative, "/completion", {**BODY, "speculative.n_max": -1})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "speculative.n_max"


def test_a_draft_model_drafts_what_the_model_samples(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path
) -> None:
    """``--spec-type draft-simple -md FILE``: the model drafting for itself guesses the tokens it samples."""
    settings = Settings.of(model=str(tiny_gguf), ctx_size=1024, parallel=1, threads=1, spec_type="draft-simple")
    drafting = server_factory(settings.replace(spec_draft_model=str(tiny_gguf), spec_draft_n_max=4))
    # (No repeat penalty: the draft model guesses the unpenalised greedy token; LFM's default penalises.)
    body = {**BODY, "cache_prompt": False, "repeat_penalty": 1.0}
    on = post(drafting, "/completion", body).json()
    off = post(drafting, "/completion", {**body, "speculative": False}).json()
    assert on["content"] == off["content"] and on["tokens_predicted"] == off["tokens_predicted"] == 64
    # The first token comes with the prompt; then each step verifies 4 drafted tokens, all kept (5 tokens a
    # step) up to 61 tokens, and a last draft of 2 (never past n_predict): 12 * 4 + 2.
    assert (on["timings"]["draft_n"], on["timings"]["draft_n_accepted"]) == (50, 50)
    props = httpx.get(drafting.url + "/props").json()
    assert props["default_generation_settings"]["params"]["speculative.types"] == "draft-simple"


def test_token_probabilities_are_those_decoding_one_token_at_a_time_gives(speculative: ServerThread) -> None:
    """``n_probs`` with drafts: each drafted position's probabilities come from its own row of the batch."""
    body = {**BODY, "cache_prompt": False, "n_probs": 3}
    on = post(speculative, "/completion", body).json()
    off = post(speculative, "/completion", {**body, "speculative": False}).json()
    assert on["timings"]["draft_n"] > 0 and "draft_n" not in off["timings"]
    assert len(on["completion_probabilities"]) == 64
    for drafted, plain in zip(on["completion_probabilities"], off["completion_probabilities"], strict=True):
        assert drafted["id"] == plain["id"]
        assert [t["id"] for t in drafted["top_logprobs"]] == [t["id"] for t in plain["top_logprobs"]]
        assert drafted["logprob"] == pytest.approx(plain["logprob"], abs=1e-4)
