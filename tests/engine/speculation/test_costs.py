"""The batch costs measured when a speculative engine starts: which counts are timed, on an empty sequence left
empty, within the budget."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from lfmserve.engine.speculation import costs as costs_module
from lfmserve.engine.speculation.costs import CostMeter, measure_batch_costs, measured_counts
from lfmserve.engine.speculation.worth import BatchCosts
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


class _Ctx:
    n_batch = 64

    def __init__(self, threads: int) -> None:
        self.n_threads = self.n_threads_batch = threads


def _meter_run(
    monkeypatch: pytest.MonkeyPatch,
    n_max: int,
    ms: Callable[[int, int, int], float],
    *,
    threads: int = 1,
    adaptive: bool = True,
) -> tuple[CostMeter, list[BatchCosts | None]]:
    """A meter of a context of ``threads`` driven to its end; ``ms(n, decode, threads)`` is the scripted time of
    the ``decode``-th decode, of ``n`` tokens on ``threads``."""
    decodes = itertools.count()
    monkeypatch.setattr(
        costs_module, "_timed_decode", lambda ctx, seq_id, n, threads: ms(n, next(decodes), threads) / 1e3
    )
    meter, results = CostMeter(n_max, adaptive=adaptive), []
    while not meter.done:
        results.append(meter.step(_Ctx(threads), 1))  # type: ignore[arg-type]
    return meter, results


def test_a_model_too_quick_to_time_gets_the_linear_costs_after_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    meter, results = _meter_run(monkeypatch, 12, lambda n, *_: 0.5 * n)
    # 2 untimed decodes, 3 units, then 1 .. 8 and 12 each beside a unit: 2 + 3 + 2 * 8
    assert len(results) == 21 and results[:-1] == [None] * 20
    last = results[-1]
    assert last is not None and last.units == () and not meter.measurable  # measuring again would not help


def test_passes_go_on_until_one_moves_no_time_and_the_fastest_time_of_each_count_is_kept(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The first pass on a busy machine (every decode twice as slow), then quiet ones: 10 ms a token, 4 at 25 ms.
    def ms(n: int, decode: int, _: int) -> float:
        return (2.0 if decode < 21 else 1.0) * (25.0 if n == 4 else 10.0 * n)

    with caplog.at_level(logging.INFO, logger="lfmserve.engine.speculation.costs"):
        _, results = _meter_run(monkeypatch, 12, ms)
    passes = [costs for costs in results if costs is not None]
    assert len(results) == 21 + 16 + 16 and len(passes) == 3  # the third pass moved nothing
    expected = pytest.approx((1.0, 2.0, 3.0, 2.5, 5.0, 6.0, 7.0, 8.0, 12.0), rel=1e-12)
    assert passes[0].units == expected and passes[2].units == expected
    assert caplog.messages == [
        "speculation: decode costs of 1..12 tokens measured between requests in 3 passes, 2.4 s of decoding "
        "(1 token 10.0 ms; in single decodes: 1:1.00 2:2.00 3:3.00 4:2.50 5:5.00 6:6.00 7:7.00 8:8.00 12:12.00); "
        "drafts worth verifying for one stream at acceptance 0.5 / 0.8 / 0.95: 0 / 3 / 3 tokens"
    ]


def test_a_machine_that_never_settles_is_measured_six_passes_at_most(monkeypatch: pytest.MonkeyPatch) -> None:
    _, results = _meter_run(monkeypatch, 4, lambda n, decode, _: 10.0 * n * (1 - decode / 100))  # ever faster
    assert len([costs for costs in results if costs is not None]) == 6


def test_the_measurement_ends_mid_pass_once_its_decodes_have_taken_five_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Beside a busy process, 300 ms a decode (less 3 ms each time): after 19 decodes, 5.19 s (18: 4.94 s). The
    # first pass had timed 2 untimed, 3 units, then 1 .. 8 each beside a unit; 12 was not reached.
    meter, results = _meter_run(monkeypatch, 12, lambda n, decode, _: 300.0 * (1 - decode / 100))
    last = results[-1]
    assert meter.done and len(results) == 19 and results[:-1] == [None] * 18
    assert last is not None and last.counts == (1, 2, 3, 4, 5, 6, 7, 8)


def test_a_budget_spent_before_a_second_count_is_timed_leaves_the_linear_costs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="lfmserve.engine.speculation.costs"):
        meter, results = _meter_run(monkeypatch, 12, lambda *_: 2000.0)  # 2 untimed and a unit: 6 s
    last = results[-1]
    assert meter.done and len(results) == 3 and last is not None and last.units == ()
    assert caplog.messages == ["speculation: a decode takes 2000.00 ms, too long to measure: linear costs"]
    # A busy moment: a later measurement may time it, and a single decode much faster than this unit asks for one.
    assert meter.measurable and meter.unit_seconds == 2.0


def _decodes_on(
    monkeypatch: pytest.MonkeyPatch,
    one_thread_ms: float,
    caplog: pytest.LogCaptureFixture,
    *,
    adaptive: bool = True,
    two_threads_ms: float = 20.0,
) -> tuple[list[int], BatchCosts | None]:
    """A two-thread context whose single decodes take ``two_threads_ms`` on two threads, ``one_thread_ms`` on one,
    and whose batches cost as many single decodes as their tokens: the threads of each decode, and the costs
    measured."""
    threads: list[int] = []

    def ms(n: int, _: int, on: int) -> float:
        threads.append(on)
        return n * (two_threads_ms if on == 2 else one_thread_ms)

    with caplog.at_level(logging.INFO, logger="lfmserve.engine.speculation.costs"):
        _, results = _meter_run(monkeypatch, 4, ms, threads=2, adaptive=adaptive)
    return threads, results[-1]


def test_a_quiet_machine_is_measured_on_all_the_threads(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # One thread decodes a token in 34 ms: not faster than two (20 ms) by the thread tuner's margin.
    threads, costs = _decodes_on(monkeypatch, 34.0, caplog)
    # 1 untimed on one thread, single decodes on one and on two threads in turn three times, 1 untimed, 3 units,
    # then 2 .. 4 beside a unit in a pass, and a second pass that moves nothing.
    assert threads == [1, 1, 2, 1, 2, 1, 2] + [2] * (1 + 3 + 6 + 6)
    assert costs is not None and costs.units == (1.0, 2.0, 3.0, 4.0)
    assert "on one thread" not in caplog.text


def test_beside_busy_processes_costs_are_measured_on_the_one_thread_the_engine_then_decodes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    threads, costs = _decodes_on(monkeypatch, 16.0, caplog)  # one thread: 16 ms, below 0.85 of 20
    assert threads == [1, 1, 2, 1, 2, 1, 2] + [1] * (1 + 3 + 6 + 6)
    assert costs is not None and costs.units == (1.0, 2.0, 3.0, 4.0)
    assert caplog.messages[0] == (
        "speculation: a token decodes in 16.0 ms on one thread and 20.0 ms on 2: costs measured on one"
    )


def test_without_adaptive_threads_the_costs_are_measured_on_all_of_them_however_busy(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # --no-adaptive-threads: the engine decodes on both threads whatever one would do, so the costs are measured there.
    threads, costs = _decodes_on(monkeypatch, 16.0, caplog, adaptive=False)
    assert threads == [2, 2] + [2] * (3 + 6 + 6)
    assert costs is not None and costs.units == (1.0, 2.0, 3.0, 4.0) and "on one thread" not in caplog.text


def test_one_decode_on_every_thread_far_slower_than_on_one_decides_at_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Beside busy processes a decode on both threads waits for a core at every barrier: measured, 2,152 ms against
    # 28 ms on one. A request that comes meanwhile waits for it: the measurement does not try a second.
    threads, costs = _decodes_on(monkeypatch, 20.0, caplog, two_threads_ms=2000.0)
    assert threads == [1, 1, 2] + [1] * (1 + 3 + 6 + 6)
    assert costs is not None and costs.units == (1.0, 2.0, 3.0, 4.0)
    assert caplog.messages[0] == (
        "speculation: a token decodes in 20.0 ms on one thread and 2000.0 ms on 2: costs measured on one"
    )
