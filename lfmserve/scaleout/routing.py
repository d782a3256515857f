"""The replicas ranked for a request's routing key: affinity first, then a load bound.

The key itself comes from the request's shape (:func:`lfmserve.api.trace.route_key`): one key per conversation.

Why rendezvous hashing with a load bound (Mirrokni et al., "consistent hashing with bounded loads"): each key
has a stable order of preference over the replicas, adding a replica moves only the keys that now prefer it
(about 1/N), and a replica loaded beyond ``balance`` times the average is passed over, so a hot key or an
unlucky spread spills to the next replica in its order instead of queueing.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence

#: A replica above this multiple of the mean load (counting the request being placed) is passed over.
DEFAULT_BALANCE = 1.25


def preference(key: str, replicas: Sequence[str]) -> list[str]:
    """The replicas in the key's rendezvous order: highest hash of (key, replica) first; stable per key."""
    return sorted(replicas, key=lambda replica: _weight(key, replica), reverse=True)


def _weight(key: str, replica: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}\0{replica}".encode(), digest_size=8).digest(), "big")


def rank(
    key: str,
    replicas: Sequence[str],
    loads: Mapping[str, int],
    *,
    capacity: int | None = None,
    balance: float = DEFAULT_BALANCE,
) -> list[str]:
    """Every replica, best first, for a request with ``key`` when ``loads`` (in-flight requests) stand.

    The key's rendezvous order, except that a replica whose load would exceed ``ceil(balance * mean)`` (the
    mean counting this request) or reach ``capacity`` (its slots) goes behind the ones that would not, in the
    same order. A request without a key ("") prefers the least loaded replicas.
    """
    if not replicas:
        return []
    if not key:
        return sorted(replicas, key=lambda replica: (loads.get(replica, 0), replica))
    bound = math.ceil(balance * (sum(loads.get(r, 0) for r in replicas) + 1) / len(replicas))
    ordered = preference(key, replicas)

    def fits(replica: str) -> bool:
        load = loads.get(replica, 0)
        return load + 1 <= bound and (capacity is None or load < capacity)

    return [r for r in ordered if fits(r)] + [r for r in ordered if not fits(r)]
