"""The offline replay: on a synthetic 16-user trace, our ranking reuses more of the prompt cache than round robin
(and than Ray's consistent hashing), with a TTFT p95 no worse."""

from __future__ import annotations

import pytest

from lfmserve.scaleout.simulate import consistent_hash, ours, power_of_two, round_robin, simulate, synthetic_trace


def test_ours_beats_round_robin_on_the_16_user_trace(capsys: pytest.CaptureFixture[str]) -> None:
    trace = synthetic_trace(n_users=16, turns=6)
    assert len(trace) == 96
    results = {
        "round-robin": simulate(trace, round_robin(), 2),
        "power-of-two": simulate(trace, power_of_two(), 2),
        "consistent-hash": simulate(trace, consistent_hash(slots=2), 2),
        "ours": simulate(trace, ours(slots=2), 2),
    }
    with capsys.disabled():
        for name, result in results.items():
            hits, p95 = f"{result.hit_rate:.3f}", f"{result.ttft_p95_s:.2f}"
            print(f"\n{name}: hit rate {hits}, TTFT p95 {p95} s, requests {result.requests_per_replica}")
    assert results["ours"].hit_rate > results["round-robin"].hit_rate + 0.05
    assert results["ours"].hit_rate > results["consistent-hash"].hit_rate
    assert results["ours"].ttft_p95_s <= results["round-robin"].ttft_p95_s
    assert max(results["ours"].requests_per_replica) <= 52  # balanced (consistent hashing put 60 on one)
