"""How long a draft is worth verifying: the linear cost stand-in, measured costs read by count, and each slot's
acceptance record."""

from __future__ import annotations

import pytest

from lfmserve.engine.speculation import Acceptance, best_draft_length
from lfmserve.engine.speculation.worth import LINEAR_COSTS, BatchCosts, drafts_can_pay, expected_kept, step_cost
from tests.engine.speculation.conftest import GEMMA_MS


def test_the_linear_model_costs_a_second_token_0_8_and_each_further_one_0_4() -> None:
    assert [step_cost(n) for n in (1, 2, 3, 5)] == [1.0, 1.8, 2.2, pytest.approx(3.0)]
    assert LINEAR_COSTS.units == () and LINEAR_COSTS(5) == step_cost(5)
    assert expected_kept(0.5, 3) == 0.875 and expected_kept(0.9, 0) == 0


def test_acceptance_decays_the_old_record_by_a_tenth_per_draft() -> None:
    acceptance = Acceptance(kept=9.0, cut=1.0)
    acceptance.update(2, cut_short=True)
    assert acceptance.kept == pytest.approx(10.1) and acceptance.cut == pytest.approx(1.9)
    acceptance.update(4, cut_short=False)
    assert acceptance.kept == pytest.approx(13.09) and acceptance.cut == pytest.approx(1.71)


def test_the_draft_length_is_the_one_that_makes_the_step_yield_the_most_tokens_per_second() -> None:
    # A batch of n tokens costs 1 + 0.8 + 0.4 (n - 2) single-token decodes; a draft of k keeps q + ... + q**k.
    assert best_draft_length(0.9, 48) == 5  # (1 + 3.69) / 3.4 = 1.378 tokens per decode (4: 1.365, 6: 1.373)
    assert best_draft_length(0.99, 12) == 12  # never longer than the drafter's draft
    assert best_draft_length(1.0, 48) == 48
    assert best_draft_length(0.6, 48) == best_draft_length(0.7, 48) == 0  # slower than not drafting
    # Beside other streams the batch is compute-bound already: a draft must be kept nearly whole to pay.
    assert best_draft_length(0.8, 48) == 3
    assert best_draft_length(0.8, 48, streams=16, batch=16) == 0  # 16.8 / 7.8 < 16 / 7.4
    assert best_draft_length(0.9, 48, streams=4, batch=4) == 3  # 6.44 / 3.8 (2: 5.71 / 3.4, 4: 7.10 / 4.2)
    acceptance = Acceptance()
    assert acceptance.q == 0.9  # a fresh slot drafts
    for _ in range(3):
        acceptance.update(0, cut_short=True)  # three drafts rejected whole
    assert round(acceptance.q, 4) == 0.6561 and best_draft_length(acceptance.q, 48) == 0  # 6.561 kept, 3.439 cut
    acceptance.update(30, cut_short=False)  # a long run copied
    assert round(acceptance.q, 4) == 0.9206 and best_draft_length(acceptance.q, 48) == 6
    # A guess still being compared, right for 3 tokens so far, is judged with them counted: 38.90 kept to 3.10.
    assert round(acceptance.q_with(3), 4) == 0.9263 and acceptance.q_with(0) == acceptance.q


def test_measured_costs_pick_the_draft_whose_batch_the_kernels_take_cheaply() -> None:
    costs = BatchCosts(GEMMA_MS)  # any unit: each count is divided by the single decode
    assert costs(1) == 1.0 and costs(8) == 66.7 / 17.6 and costs.counts == tuple(GEMMA_MS)
    # Between two measured counts, the next one up: 9 .. 12 take the same groups of columns as 12.
    assert costs(9) == costs(12) == 101.7 / 17.6 and costs(13) == 117.5 / 17.6 and costs(17) == 274.0 / 17.6
    # Past the last, as it grew between the last two: (274 - 117.5) / 32 ms a token.
    assert costs(60) == pytest.approx((274.0 + 12 * (274.0 - 117.5) / 32) / 17.6)
    # q = 0.95 alone: 7 drafted (a batch of 8: 1 + 5.19 kept in 3.79 decodes, 1.78 a decode) beats 6 (1.40),
    # 11 (1.59) and 15 (1.68); the linear model would verify 8 (1.61 by its own reckoning).
    assert best_draft_length(0.95, 48, costs=costs) == 7
    assert best_draft_length(0.95, 48) == 8
    # q = 0.8: 3 (a batch of 4: 1 + 1.95 in 2.54 decodes, 1.16) beats not drafting; 1 (1.8 in 1.95) does not.
    assert best_draft_length(0.8, 48, costs=costs) == 3
    assert best_draft_length(0.7, 48, costs=costs) == 0  # 3 would give 0.997
    # q = 0.99: the whole batch of 48 (1 + 37.3 kept in 15.6 decodes, 2.46) beats 15 (1 + 13.85 in 6.68, 2.23).
    assert best_draft_length(0.99, 48, costs=costs) == 47
    # A multiple of four measured dearer than a larger one takes the larger one's time (noise); 7 may cost more.
    noisy = BatchCosts({1: 10.0, 4: 30.0, 7: 55.0, 8: 50.0, 12: 45.0, 16: 60.0})
    assert noisy.units == (1.0, 3.0, 5.5, 4.5, 4.5, 6.0)


def test_drafts_can_pay_only_where_a_batch_within_the_bound_beats_its_single_decodes() -> None:
    measured = BatchCosts({1: 11.0, 2: 24.6, 3: 33.4, 4: 38.3})  # 2.24, 3.04 and 3.48 single decodes
    assert [drafts_can_pay(measured, n) for n in (1, 2, 3, 4)] == [False, False, False, False]
    assert drafts_can_pay(BatchCosts({1: 10.0, 2: 19.0, 3: 23.0}), 3)  # 3 tokens in 2.3 decodes, under 2.4
    # The linear stand-in: 2 tokens cost 1.8 decodes, not under 0.8 of 2; 3 cost 2.2, under 2.4.
    assert [drafts_can_pay(BatchCosts(), n) for n in (2, 3)] == [False, True]


def test_the_engines_decodes_replace_the_measured_costs_then_only_a_faster_one_does() -> None:
    # Measured while another process ran: the single decode at 20 ms (it takes 10), 3 and 6 tokens dearer too.
    costs = BatchCosts({1: 20.0, 3: 40.0, 6: 60.0})
    assert BatchCosts().refined(1, 1.0) is None  # the linear model has no times to refine
    unit = costs.refined(1, 10.0)
    # 3 and 6 keep their measured ratio to the single decode until a decode of theirs is timed.
    assert unit is not None and unit.units == (1.0, 2.0, 3.0)
    assert unit.refined(1, 9.8) is None and unit.refined(1, 12.0) is None  # within 3%, slower
    three = unit.refined(3, 35.0)  # the first decode of 3 tokens: its time, dearer than the ratio said
    assert three is not None and three.units == (1.0, 3.5, 3.0)
    assert three.refined(3, 36.0) is None and three.refined(1, 10.5) is None
    faster = three.refined(1, 5.0)  # a faster single decode: 6 (never timed) keeps its ratio, 3 its time
    assert faster is not None and faster.units == (1.0, 7.0, 3.0)
    added = faster.refined(5, 20.0)  # a count not measured: its own time from now on
    assert added is not None and added.counts == (1, 3, 5, 6) and added(4) == 4.0
