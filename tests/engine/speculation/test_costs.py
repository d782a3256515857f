"""The batch costs measured when a speculative engine starts: which counts are timed, on an empty sequence left
empty, within the budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from lfmserve.engine.speculation import costs as costs_module
from lfmserve.engine.speculation.costs import measure_batch_costs, measured_counts
from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel


def test_every_count_to_8_is_timed_then_every_fourth_to_24_then_every_eighth_and_the_largest() -> None:
    assert measured_counts(1) == [1]
    assert measured_counts(8) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert measured_counts(10) == [1, 2, 3, 4, 5, 6, 7, 8, 10]
    assert measured_counts(24) == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24]
    assert measured_counts(40) == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 32, 40]


def test_costs_are_measured_on_an_empty_sequence_and_leave_it_empty(
    tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = NativeModel(tiny_gguf)
    ctx = NativeContext(model, n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=2, n_threads=1, n_threads_batch=1)
    try:
        # The tiny model decodes a token in well under 2 ms: not worth measuring, the linear model stands in.
        assert measure_batch_costs(ctx, seq_id=1, n_max=12).units == ()
        monkeypatch.setattr(costs_module, "MEASURABLE_S", 0.0)
        costs = measure_batch_costs(ctx, seq_id=1, n_max=12)
        assert costs.counts == (1, 2, 3, 4, 5, 6, 7, 8, 12) and costs.units[0] == 1.0
        assert all(u > 0 for u in costs.units)
        assert ctx.seq_pos_max(1) == -1  # nothing left in the sequence
        assert measure_batch_costs(ctx, seq_id=1, n_max=500).counts[-1] == 64  # never more than a batch
        assert measure_batch_costs(ctx, seq_id=1, n_max=40, budget_s=0.0).counts == (1,)  # the budget spent
        assert measured_counts(49) == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 32, 40, 48, 49]
    finally:
        ctx.close()
        model.close()
