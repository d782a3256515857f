"""The ranking, without Ray: balance, ~1/N moved keys when a replica joins, and the load bound."""

from __future__ import annotations

import random
from collections import Counter

from lfmserve.scaleout.routing import preference, rank

REPLICAS = [f"replica-{i}" for i in range(4)]
KEYS = [f"chat:{random.Random(7).getrandbits(64):x}-{i}" for i in range(8000)]


def test_idle_replicas_share_the_keys_evenly() -> None:
    shares = Counter(rank(key, REPLICAS, {})[0] for key in KEYS)
    assert sorted(shares) == REPLICAS
    assert all(abs(count - 2000) < 150 for count in shares.values()), shares


def test_a_new_replica_takes_about_a_fifth_of_the_keys_and_only_moves_keys_to_itself() -> None:
    before = {key: preference(key, REPLICAS)[0] for key in KEYS}
    after = {key: preference(key, [*REPLICAS, "replica-4"])[0] for key in KEYS}
    moved = [key for key in KEYS if before[key] != after[key]]
    assert {after[key] for key in moved} == {"replica-4"}
    assert abs(len(moved) / len(KEYS) - 1 / 5) < 0.02


def test_a_replica_over_the_load_bound_is_passed_over_in_the_keys_order() -> None:
    key = next(k for k in KEYS if preference(k, REPLICAS)[0] == "replica-0")
    order = preference(key, REPLICAS)
    even = dict.fromkeys(REPLICAS, 1)  # bound ceil(1.25 * 5 / 4) = 2: every replica fits
    assert rank(key, REPLICAS, even) == order
    assert rank(key, REPLICAS, {**even, "replica-0": 2}) == [*order[1:], "replica-0"]  # bound 2, it would be at 3
    assert rank(key, REPLICAS, {"replica-0": 1}) == [*order[1:], "replica-0"]  # bound 1 while the others idle
    full = dict.fromkeys(REPLICAS, 2)  # at capacity everywhere: the key's own order again
    assert rank(key, REPLICAS, full, capacity=2) == order
    assert rank("", REPLICAS, {"replica-0": 2, "replica-1": 0, "replica-2": 1, "replica-3": 0}) == [
        "replica-1",
        "replica-3",
        "replica-2",
        "replica-0",
    ]
