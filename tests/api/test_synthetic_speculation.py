"""``--spec-synth-rates`` / ``--spec-synth-len``, llama-server's benchmarking mode: drafts are verified whole and each
position is kept by chance, whatever the model samples (never an end token, never under a grammar)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lfmserve.engine.speculation import resolve_synth_rates
from lfmserve.errors import EngineError
from lfmserve.loading.engine_config import engine_config
from lfmserve.settings import Settings
from tests.conftest import ServerThread, post

PROMPT = "Tell me a story about a cat and a dog that lived in a small house near the river. Once upon a time"
BODY: dict[str, Any] = {"prompt": PROMPT, "n_predict": 40, "temperature": 0, "ignore_eos": True, "return_tokens": True}


def synthetic(server_factory: Callable[..., ServerThread], model: Path, rate: float) -> ServerThread:
    """The tiny random model drafting from its own tokens (it rejects nearly every such draft itself)."""
    settings = Settings.of(
        model=str(model),
        ctx_size=512,
        parallel=1,
        threads=1,
        spec_type="ngram-simple",
        spec_ngram_simple_size_n=1,
        spec_ngram_simple_size_m=4,
        spec_synth_rates=",".join([str(rate)] * 4),
    )
    return server_factory(settings)


@pytest.mark.slow
def test_rate_1_keeps_every_draft_and_rate_0_none(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    keeps = synthetic(server_factory, tiny_gguf, 1.0)
    timings = post(keeps, "/completion", BODY).json()["timings"]
    assert timings["draft_n"] > 0 and timings["draft_n_accepted"] == timings["draft_n"]
    drops = synthetic(server_factory, tiny_gguf, 0.0)
    alone = post(drops, "/completion", {**BODY, "speculative": False}).json()
    drafted = post(drops, "/completion", BODY).json()
    assert drafted["timings"]["draft_n"] > 0 and drafted["timings"]["draft_n_accepted"] == 0
    assert drafted["tokens"] == alone["tokens"] and len(alone["tokens"]) == 40


@pytest.mark.parametrize(
    ("length", "rates", "n_max", "message"),
    [
        (2.0, (0.5,), 1, "synthetic acceptance length and rates are mutually exclusive"),
        (None, (0.5,), 0, "synthetic acceptance requires at least one speculative token"),
        (None, (0.5, 0.4), 3, "synthetic acceptance rates must contain 3 values, got 2"),
        (None, (0.5, 1.5), 2, "synthetic acceptance rates must be finite and within [0, 1]"),
        (None, (0.5, float("nan")), 2, "synthetic acceptance rates must be finite and within [0, 1]"),
        (None, (0.4, 0.5), 2, "synthetic acceptance rates must be monotonically non-increasing"),
        (5.0, (), 3, "synthetic acceptance length must be finite and within [1, 4]"),
    ],
)
def test_llama_servers_checks_and_messages(
    length: float | None, rates: tuple[float, ...], n_max: int, message: str
) -> None:
    with pytest.raises(EngineError) as error:
        resolve_synth_rates(length, rates, n_max)
    assert str(error.value) == message


def test_a_mean_length_gives_geometric_rates() -> None:
    assert resolve_synth_rates(None, (), 4) == ()
    assert resolve_synth_rates(1.0, (), 3) == (0.0, 0.0, 0.0)
    assert resolve_synth_rates(4.0, (), 3) == (1.0, 1.0, 1.0)
    rates = resolve_synth_rates(2.0, (), 2)  # p + p**2 = 1: p is the golden ratio's inverse
    assert rates == pytest.approx((0.6180339887, 0.3819660113), abs=1e-8)


def test_synthetic_acceptance_needs_a_drafter() -> None:
    message = "^synthetic acceptance requires an initialized speculative decoding context$"
    with pytest.raises(EngineError, match=message):
        engine_config(Settings.of(model="m.gguf", spec_synth_rates="0.5"))
    with pytest.raises(EngineError, match="^--spec-synth-rates: invalid value 'x'$"):
        engine_config(Settings.of(model="m.gguf", spec_type="ngram-simple", spec_synth_rates="0.5,x"))
