"""``--router ours``: a Ray Serve request router that sends each conversation back to the replica holding its
prompt cache, unless that replica is overloaded (:func:`~lfmserve.scaleout.routing.rank`).

Serve gives :meth:`AffinityRouter.choose_replicas` the live replicas and the pending request, whose
``session_id`` the ingress set to the request's routing key; it answers ranked groups, ``[[primary],
[secondary], rest]``, and Serve sends the request to the first group with a replica below its
``max_ongoing_requests`` (its slots). A replica's load is the router's own count of the requests it has in
flight there (updated on every send and completion), else the engine's busy slots and queue from
``record_routing_stats``. Not ``FIFOMixin``: it would hand a replica to whichever request waited longest,
whatever its key.
"""

from __future__ import annotations

from typing import Any

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from .routing import rank


class AffinityRouter(RequestRouter):  # type: ignore[misc,unused-ignore]  # Any without ray installed
    """Rendezvous order by routing key, bounded by load; a request without a key goes to the least loaded."""

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        key = ""
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True  # all full: wait a little, then rank again
            key = pending_request.metadata.session_id or ""
        by_id = {replica.replica_id.unique_id: replica for replica in candidate_replicas}
        loads = {name: self._load(replica) for name, replica in by_id.items()}
        capacity = min(replica.max_ongoing_requests for replica in candidate_replicas)
        order = [by_id[name] for name in rank(key, list(by_id), loads, capacity=capacity)]
        return [group for group in ([order[0]], order[1:2], order[2:]) if group]

    def _load(self, replica: RunningReplica) -> int:
        in_flight: int | None = self.replica_queue_len_cache.get(replica.replica_id)
        if in_flight is not None:
            return in_flight
        stats: dict[str, Any] = replica.routing_stats or {}
        return int(stats.get("n_busy_slots", 0)) + int(stats.get("n_waiting", 0))
