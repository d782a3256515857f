"""``--spec-exact`` (off by default): greedy output with drafts is the output without them, on a CPU whose
kernels compute a row of a batch differently from the same token decoded alone (Gemma-3-270M's repacked Q4_K
matrices: 4-row gemm against the single decode's gemv), and one start line says what that allows here. Without
it, drafts verified in batches of 4 or more depart from the output without drafts at near ties, as
llama-server's do (:mod:`lfmserve.engine.speculation.exactness`), and nothing is measured."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from lfmserve.engine import core as core_module
from lfmserve.engine.core import Engine
from lfmserve.engine.records import EngineConfig, EngineRequest
from lfmserve.engine.speculation import SPEC_TYPES, SpeculationConfig
from lfmserve.engine.speculation.exactness import exact_batch_size
from lfmserve.engine.speculation.worth import BatchCosts
from lfmserve.llama.batch import Batch
from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel
from tests.engine.conftest import GREEDY, run, tokens_of
from tests.engine.speculation.conftest import give_batch_costs, spec_config

#: Code that repeats itself: ngram-simple drafts, and verified in one batch its drafts change the 24th token.
CODE = (
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
    "class Vector:\n    def __init__(self"
)


@pytest.fixture(scope="module")
def gemma(gemma_gguf: Path) -> Iterator[NativeModel]:
    model = NativeModel(gemma_gguf)
    if "CPU_REPACK" not in model.buffers:
        model.close()
        pytest.skip("llama.cpp does not repack weights on this CPU: no batch size departs from a single decode here")
    yield model
    model.close()


#: ``--spec-type ngram-simple --spec-exact``.
EXACT = SpeculationConfig(types=("ngram-simple",), exact=True)


def _greedy(model: NativeModel, speculation: SpeculationConfig | None, text: str, n: int) -> tuple[list[int], int]:
    """``n`` greedy tokens after ``text``, and how many tokens were drafted and verified."""
    config = EngineConfig(n_ctx=8192, n_slots=1, n_batch=2048, n_ubatch=512, n_threads=1)
    engine = Engine(model, replace(config, speculation=speculation) if speculation else config)
    try:
        prompt = tuple(model.tokenize(text, add_special=True, parse_special=False))
        outputs = run(engine, EngineRequest(prompt_tokens=prompt, sampling=GREEDY, max_tokens=n))
        return tokens_of(outputs), outputs[-1].timings.draft_n
    finally:
        engine.close()


def _exact_run_lines(
    model: NativeModel, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> list[str]:
    """48 greedy tokens with ``--spec-exact``, which must draft and match the output without drafts; the engine's
    lines of that run."""
    give_batch_costs(model, monkeypatch)
    expected, _ = _greedy(model, None, CODE, 48)
    with caplog.at_level(logging.INFO, logger="lfmserve.engine"):
        got, drafted = _greedy(model, EXACT, CODE, 48)
    assert drafted > 0 and got == expected
    return _engine_lines(caplog)


def test_repacked_kernels_compute_batches_of_up_to_3_as_single_decodes(gemma: NativeModel) -> None:
    ctx = NativeContext(gemma, n_ctx=512, n_batch=64, n_ubatch=64, n_seq_max=1, n_threads=1, n_threads_batch=1)
    try:
        assert exact_batch_size(ctx, seq_id=0, n_max=16) == 3
        assert ctx.seq_pos_max(0) == -1  # the probe leaves the sequence empty
    finally:
        ctx.close()


def test_greedy_output_with_drafts_is_the_output_without_them(
    gemma: NativeModel, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert _exact_run_lines(gemma, monkeypatch, caplog) == [
        "speculative decoding with --spec-exact: drafts of up to 2 tokens verified, as llama.cpp's kernels here "
        "compute a batch of up to 3 tokens as they compute each token alone (without --spec-exact, drafts are "
        "verified in batches of any size, as llama-server does)"
    ]


@pytest.fixture(scope="module")
def plain_gemma(gemma_gguf: Path) -> Iterator[NativeModel]:
    """Gemma-3-270M with its weights as stored (not repacked), on any CPU: the kernels take 8 rows at a time."""
    model = NativeModel(gemma_gguf, repack=False)
    yield model
    model.close()


def test_the_start_line_says_how_long_a_draft_spec_exact_allows_here(
    plain_gemma: NativeModel, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Batches of up to 7 are exact without repacking, and with Gemma's costs those pay."""
    assert _exact_run_lines(plain_gemma, monkeypatch, caplog) == [
        "speculative decoding with --spec-exact: drafts of up to 6 tokens verified, as llama.cpp's kernels here "
        "compute a batch of up to 7 tokens as they compute each token alone (without --spec-exact, drafts are "
        "verified in batches of any size, as llama-server does)"
    ]


def test_where_no_exact_batch_can_pay_speculation_is_off_and_says_so(
    gemma: NativeModel, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Costs as measured on a faster day here: 2 and 3 tokens cost more than 2 and 3 single decodes.
    costs = BatchCosts({1: 11.0, 2: 24.6, 3: 33.4, 4: 38.3, 8: 42.6})
    monkeypatch.setattr(core_module, "measure_batch_costs", lambda *_, **__: costs)
    expected, _ = _greedy(gemma, None, CODE, 16)
    with caplog.at_level(logging.INFO, logger="lfmserve.engine"):
        got, drafted = _greedy(gemma, EXACT, CODE, 16)
    assert (got, drafted) == (expected, 0)
    assert _engine_lines(caplog) == [
        "speculative decoding is off: with --spec-exact, llama.cpp's kernels here compute a batch of more than 3 "
        "tokens differently from decoding them one at a time, and a batch that small costs more than decoding its "
        "tokens one at a time (without --spec-exact, drafts are verified in batches of any size, as llama-server "
        "does; near ties can then go either way)"
    ]


def test_without_spec_exact_nothing_is_measured_or_said(
    plain_gemma: NativeModel, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    give_batch_costs(plain_gemma, monkeypatch)
    monkeypatch.setattr(core_module, "exact_batch_size", _never_called)
    with caplog.at_level(logging.INFO, logger="lfmserve.engine"):
        _, drafted = _greedy(plain_gemma, SpeculationConfig(types=("ngram-simple",)), CODE, 48)
    assert drafted > 0 and _engine_lines(caplog) == []


def test_by_default_a_repacking_cpu_verifies_drafts_in_batches_larger_than_its_exact_size(
    gemma: NativeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Here only batches of up to 3 compute as single decodes (the test above); without ``--spec-exact`` the
    engine verifies longer drafts anyway, as llama-server does."""
    give_batch_costs(gemma, monkeypatch)
    sizes: list[int] = []
    decode = NativeContext.decode

    def counted(ctx: NativeContext, batch: Batch | None = None) -> None:
        sizes.append((batch or ctx.batch).n_tokens)
        decode(ctx, batch)

    monkeypatch.setattr(NativeContext, "decode", counted)
    _, drafted = _greedy(gemma, SpeculationConfig(types=("ngram-simple",)), CODE, 48)
    prompt = len(gemma.tokenize(CODE, add_special=True, parse_special=False))
    steps = sizes[sizes.index(prompt) + 1 :]  # after the prompt's decode
    assert drafted > 0 and max(steps) > 3, steps


def _never_called(*_: object, **__: object) -> int:
    raise AssertionError("the exact batch size is measured only with --spec-exact")


def _engine_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the engine's start and the exactness probe said (not the requests' lines, nor the thread tuner's)."""
    names = ("lfmserve.engine.core", "lfmserve.engine.speculation.exactness")
    return [record.getMessage() for record in caplog.records if record.name in names]


@pytest.fixture(scope="module", params=[True, False], ids=["repacked", "not-repacked"])
def any_gemma(request: pytest.FixtureRequest, gemma_gguf: Path) -> Iterator[NativeModel]:
    model = NativeModel(gemma_gguf, repack=request.param)
    if request.param and "CPU_REPACK" not in model.buffers:
        model.close()
        pytest.skip("llama.cpp does not repack weights on this CPU")
    yield model
    model.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", SPEC_TYPES)
def test_greedy_output_is_exact_for_prompts_of_5_to_4000_tokens(
    any_gemma: NativeModel, gemma_gguf: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Each ``--spec-type`` with 3-token look-ups (draft-simple drafting with Gemma itself), with and without
    repacking, on prompts cut from this project's own architecture document, from 5 to 4,000 tokens."""
    give_batch_costs(any_gemma, monkeypatch)
    document = (Path(__file__).parents[3] / "docs" / "architecture.md").read_text()
    words = any_gemma.tokenize(document * 4, add_special=False, parse_special=False)
    speculation = replace(spec_config(kind, n=3, draft_model=gemma_gguf), exact=True)
    drafted_in_all = 0
    for n_tokens in (5, 300, 4000):
        text = any_gemma.detokenize(words[:n_tokens])
        expected, _ = _greedy(any_gemma, None, text, 64)
        got, drafted = _greedy(any_gemma, speculation, text, 64)
        departs = _first_difference(got, expected)
        assert got == expected, f"{kind}, a {n_tokens}-token prompt: departs at token {departs}"
        drafted_in_all += drafted
    assert drafted_in_all > 0


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
