"""What the speculation tests share: measured batch costs, and engines that draft."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from lfmserve.engine import core as core_module
from lfmserve.engine.core import Engine
from lfmserve.engine.records import EngineConfig
from lfmserve.engine.speculation import NgramModSizes, NgramSizes, SpeculationConfig
from lfmserve.engine.speculation.worth import BatchCosts
from lfmserve.llama.model import NativeModel

#: Gemma-3-270M's decode times here (ms), at the counts the engine measures up to 16, and 48: 4, 8, 12 and 16
#: are cheaper than the counts below them would suggest.
GEMMA_MS = {1: 17.6, 2: 34.3, 3: 39.6, 4: 44.7, 5: 63.8, 6: 70.6, 7: 76.1, 8: 66.7, 12: 101.7, 16: 117.5, 48: 274.0}


def spec_config(kind: str, *, n: int, draft_model: Path) -> SpeculationConfig:
    """``kind`` with ``n``-token lookups, so the models get drafts often. Random weights do not copy, so free
    text rejects nearly every n-gram draft (the rollback path); a grammar that repeats one phrase makes them
    keep some. The draft model is the model itself: its guesses are what greedy decoding samples. Drafts are
    verified as llama-server verifies them, in batches of any size (the default): the tiny models' F32 kernels
    compute no batch of two or more as single decodes, so ``--spec-exact`` would verify none of their drafts
    (test_exactness.py tests it)."""
    sizes = NgramSizes(size_n=n, size_m=6)
    return SpeculationConfig(
        types=(kind,),
        n_max=4,
        ngram_simple=sizes,
        ngram_map_k=sizes,
        ngram_map_k4v=sizes,
        ngram_mod=NgramModSizes(n_match=n, n_min=1, n_max=6),
        draft_model=str(draft_model),
    )


def give_batch_costs(model: NativeModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """Speculative engines built after this take their batch costs as given rather than measuring them (at start
    with ``--spec-exact``, else between requests): timed
    while the machine is busy (on CI, in a run where the fuzz test took 10 minutes), batches can measure dear
    enough that no draft looks worth verifying, and a test that needs drafts to check them sees none.
    Gemma-3-270M gets the costs measured for it on a quiet machine (:data:`GEMMA_MS`), the tiny models the
    linear stand-in they measure as (a decode too quick to time); neither is refined by the engine's own
    decodes, as measured costs are."""
    costs = FixedCosts(GEMMA_MS) if model.info.architecture == "gemma3" else FixedCosts()
    monkeypatch.setattr(core_module, "measure_batch_costs", lambda *_, **__: costs)
    monkeypatch.setattr(core_module, "CostMeter", lambda n_max, **_: GivenCosts(costs))


class FixedCosts(BatchCosts):
    """Costs the engine's own decodes do not refine: what the test gave is what the engine goes by."""

    def refined(self, n_tokens: int, seconds: float) -> BatchCosts | None:
        return None


class GivenCosts:
    """A cost meter that hands over ``costs`` at the engine's first idle look, before it takes any request."""

    def __init__(self, costs: BatchCosts) -> None:
        self.costs = costs
        self.done = False
        self.one_thread = False
        self.measurable = True
        self.unit_seconds: float | None = None

    def step(self, ctx: object, seq_id: int) -> BatchCosts:
        self.done = True
        return self.costs


def spec_engine(model: NativeModel, speculation: SpeculationConfig | None) -> Engine:
    """An engine of four slots on one thread (tests run two side by side), drafting as ``speculation`` says
    (None: not at all)."""
    config = EngineConfig(n_ctx=2048, n_slots=4, n_batch=512, n_ubatch=512, n_threads=1)
    return Engine(model, replace(config, speculation=speculation) if speculation else config)
