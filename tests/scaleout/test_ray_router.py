"""``--router ours`` without a cluster: the ranked groups Serve gets for a key, as loads change."""

from __future__ import annotations

import asyncio
import warnings
from dataclasses import dataclass, field
from typing import Any

import pytest

from lfmserve.scaleout.routing import preference

with warnings.catch_warnings():  # Ray's own import-time deprecation warnings (the suite turns warnings into errors)
    warnings.simplefilter("ignore")
    pytest.importorskip("ray.serve")
    from ray.serve._private.common import DeploymentHandleSource, DeploymentID, ReplicaID, RequestMetadata
    from ray.serve.request_router import PendingRequest

    from lfmserve.scaleout.ray_router import AffinityRouter

DEPLOYMENT = DeploymentID(name="model", app_name="lfmserve")


@dataclass
class FakeReplica:
    """What the router reads of Serve's RunningReplica."""

    replica_id: ReplicaID
    max_ongoing_requests: int = 2
    routing_stats: dict[str, Any] = field(default_factory=dict)


def replicas(*names: str) -> list[FakeReplica]:
    return [FakeReplica(ReplicaID(unique_id=name, deployment_id=DEPLOYMENT)) for name in names]


def groups(router: AffinityRouter, candidates: list[FakeReplica], session_id: str) -> list[list[str]]:
    async def choose() -> list[list[FakeReplica]]:
        metadata = RequestMetadata(request_id="r", internal_request_id="r", session_id=session_id)
        pending = PendingRequest(args=[], kwargs={}, metadata=metadata)  # its future needs a running loop
        chosen: list[list[FakeReplica]] = await router.choose_replicas(candidates, pending)
        return chosen

    return [[replica.replica_id.unique_id for replica in group] for group in asyncio.run(choose())]


def router() -> AffinityRouter:
    return AffinityRouter(
        deployment_id=DEPLOYMENT, handle_source=DeploymentHandleSource.REPLICA, use_replica_queue_len_cache=True
    )


def test_a_key_gets_its_rendezvous_order_as_primary_secondary_rest() -> None:
    candidates = replicas("a", "b", "c", "d")
    order = preference("chat:k", ["a", "b", "c", "d"])
    assert groups(router(), candidates, "chat:k") == [[order[0]], [order[1]], order[2:]]


def test_a_loaded_primary_goes_last_counting_in_flight_requests_then_routing_stats() -> None:
    r, candidates = router(), replicas("a", "b", "c")
    primary = groups(r, candidates, "chat:k")[0][0]
    r.replica_queue_len_cache.update(ReplicaID(unique_id=primary, deployment_id=DEPLOYMENT), 2)
    assert groups(r, candidates, "chat:k")[-1][-1] == primary
    r.replica_queue_len_cache.invalidate_key(ReplicaID(unique_id=primary, deployment_id=DEPLOYMENT))
    next(c for c in candidates if c.replica_id.unique_id == primary).routing_stats = {"n_busy_slots": 2}
    assert groups(r, candidates, "chat:k")[-1][-1] == primary


def test_without_a_key_the_least_loaded_comes_first() -> None:
    r, candidates = router(), replicas("a", "b")
    r.replica_queue_len_cache.update(candidates[0].replica_id, 1)
    assert groups(r, candidates, "") == [["b"], ["a"]]
    assert asyncio.run(r.choose_replicas([], None)) == []
