"""Replay a trace against N simulated replicas under a routing policy: prompt-cache hit rate and TTFT.

The model is deliberately small, the same for every policy, so the comparison is about routing: each replica
has ``slots`` parallel slots and an LRU prompt cache of ``cache_tokens`` holding message boundaries (where an
LFM2 cache is reused from); a request's cached tokens are its longest boundary the chosen replica holds; it
waits for a free slot, prefills the rest at ``prefill_tps`` and decodes ``max_tokens`` at ``decode_tps``.
Characters count as tokens at :data:`CHARS_PER_TOKEN`.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import random
import statistics
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..api.trace import TraceRecord
from .routing import rank

CHARS_PER_TOKEN = 4
#: A policy picks the replica for a record, given the replicas' ids and their in-flight counts.
Policy = Callable[[TraceRecord, Sequence[str], dict[str, int]], str]


@dataclass(slots=True)
class _Replica:
    slots: int
    cache_tokens: int
    cache: OrderedDict[str, int] = field(default_factory=OrderedDict)
    #: When each busy slot frees, a heap.
    ends: list[float] = field(default_factory=list)

    def load(self, now: float) -> int:
        while self.ends and self.ends[0] <= now:
            heapq.heappop(self.ends)
        return len(self.ends)

    def cached(self, record: TraceRecord) -> int:
        for digest, n_chars in reversed(record.boundaries):
            if digest in self.cache:
                self.cache.move_to_end(digest)
                return n_chars // CHARS_PER_TOKEN
        return 0

    def keep(self, record: TraceRecord) -> None:
        for digest, n_chars in record.boundaries:
            self.cache[digest] = n_chars // CHARS_PER_TOKEN
            self.cache.move_to_end(digest)
        while sum(self.cache.values()) > self.cache_tokens and len(self.cache) > 1:
            self.cache.popitem(last=False)


@dataclass(frozen=True, slots=True)
class SimulationResult:
    """``hit_rate``: cached prompt tokens over all prompt tokens; TTFTs in seconds; requests per replica."""

    hit_rate: float
    ttft_p50_s: float
    ttft_p95_s: float
    requests_per_replica: tuple[int, ...]


def simulate(
    trace: Sequence[TraceRecord],
    policy: Policy,
    n_replicas: int,
    *,
    slots: int = 2,
    cache_tokens: int = 32_768,
    prefill_tps: float = 400.0,
    decode_tps: float = 40.0,
    default_max_tokens: int = 128,
) -> SimulationResult:
    """Replay ``trace`` (in time order) on ``n_replicas`` replicas routed by ``policy``."""
    ids = [f"replica-{i}" for i in range(n_replicas)]
    replicas = {replica: _Replica(slots, cache_tokens) for replica in ids}
    counts = dict.fromkeys(ids, 0)
    cached_total = prompt_total = 0
    ttfts: list[float] = []
    for record in sorted(trace, key=lambda r: r.t):
        loads = {replica: replicas[replica].load(record.t) for replica in ids}
        chosen = policy(record, ids, loads)
        replica = replicas[chosen]
        counts[chosen] += 1
        prompt = record.boundaries[-1][1] // CHARS_PER_TOKEN if record.boundaries else 0
        cached = min(replica.cached(record), prompt)
        start = record.t if len(replica.ends) < slots else max(record.t, heapq.heappop(replica.ends))
        prefill_s = (prompt - cached) / prefill_tps
        heapq.heappush(replica.ends, start + prefill_s + (record.max_tokens or default_max_tokens) / decode_tps)
        replica.keep(record)
        ttfts.append(start - record.t + prefill_s)
        cached_total += cached
        prompt_total += prompt
    cuts = statistics.quantiles(ttfts, n=20, method="inclusive") if len(ttfts) > 1 else ttfts * 19
    return SimulationResult(
        hit_rate=cached_total / prompt_total if prompt_total else 0.0,
        ttft_p50_s=statistics.median(ttfts) if ttfts else 0.0,
        ttft_p95_s=cuts[18],
        requests_per_replica=tuple(counts[replica] for replica in ids),
    )


def round_robin() -> Policy:
    turn = iter(range(1 << 62))
    return lambda record, replicas, loads: replicas[next(turn) % len(replicas)]


def power_of_two(seed: int = 0) -> Policy:
    """Ray Serve's default: the less loaded of two replicas drawn at random."""
    draw = random.Random(seed)

    def choose(record: TraceRecord, replicas: Sequence[str], loads: dict[str, int]) -> str:
        first, second = draw.sample(list(replicas), 2) if len(replicas) > 1 else (replicas[0], replicas[0])
        return first if loads[first] <= loads[second] else second

    return choose


def consistent_hash(slots: int, virtual_nodes: int = 100) -> Policy:
    """Ray's ConsistentHashRouter: a hash ring of virtual nodes; the next replica only when one is full."""

    def choose(record: TraceRecord, replicas: Sequence[str], loads: dict[str, int]) -> str:
        ring = sorted((_hash(f"{replica}#{v}"), replica) for replica in replicas for v in range(virtual_nodes))
        start = bisect.bisect(ring, (_hash(record.key), ""))
        seen: list[str] = []
        for i in range(len(ring)):
            replica = ring[(start + i) % len(ring)][1]
            if replica not in seen:
                seen.append(replica)
        return next((replica for replica in seen if loads[replica] < slots), seen[0])

    return choose


def ours(slots: int) -> Policy:
    """:func:`~lfmserve.scaleout.routing.rank`'s first choice."""
    return lambda record, replicas, loads: rank(record.key, replicas, loads, capacity=slots)[0]


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def synthetic_trace(
    n_users: int = 16,
    turns: int = 6,
    *,
    n_system_prompts: int = 2,
    system_chars: int = 3_200,
    user_chars: int = 200,
    reply_chars: int = 480,
    mean_think_s: float = 30.0,
    seed: int = 0,
) -> list[TraceRecord]:
    """``n_users`` conversations of ``turns`` turns each, over ``n_system_prompts`` shared long system prompts;
    each user waits about ``mean_think_s`` between turns. Every turn's boundaries extend the previous turn's by
    its reply and the new message, as a real conversation's do."""
    draw = random.Random(seed)
    records = []
    for user in range(n_users):
        system = f"system-{user % n_system_prompts}"
        boundaries = [(hashlib.sha256(system.encode()).hexdigest()[:16], system_chars)]
        t = draw.uniform(0, mean_think_s)
        for turn in range(turns):
            n_chars = boundaries[-1][1] + (reply_chars if turn else 0) + user_chars
            boundaries.append((f"{user}-{turn}", n_chars))
            key = f"chat:{user}"
            records.append(TraceRecord(round(t, 3), key, tuple(boundaries), 128))
            t += draw.expovariate(1 / mean_think_s)
    return sorted(records, key=lambda record: record.t)
