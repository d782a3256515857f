"""Replay a conversation trace under each routing policy: prompt-cache hit rate and TTFT per turn.

Offline (default): the simulator of lfmserve.scaleout.simulate replays a recorded trace (``--trace FILE``, the
JSONL of ``lfmserve --trace-requests``) or the synthetic 16-user one on ``--replicas`` simulated replicas, under
round-robin, power-of-two, consistent-hash and ours.

Live (``--url URL``): the synthetic users (shared long system prompts, several turns each) really chat with a
running endpoint (a Ray Serve ingress started with ``lfmserve serve-ray --router ...``, or one lfmserve), each
user's turns in order, the users concurrently; TTFT is measured per turn, and the hit rate is
``timings.cache_n`` over all prompt tokens. Run it once per ``--router`` and compare.

    python bench/replay_trace.py                                  # offline, synthetic trace, 2 replicas
    python bench/replay_trace.py --trace trace.jsonl --replicas 4
    python bench/replay_trace.py --url http://127.0.0.1:8000 --users 16 --turns 4 --label ours
    python bench/replay_trace.py --ray --model 350m --users 16 --turns 4   # ours, then round robin, on Ray
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from common import IN_NAMESPACE, Server, bench_model, in_network_namespace, lfmserve_command

from lfmserve.api.trace import TraceRecord
from lfmserve.scaleout.simulate import consistent_hash, ours, power_of_two, round_robin, simulate, synthetic_trace
from lfmserve.testing import TinyLfm2, write_lfm2_gguf

COLOURS = ("red", "blue", "green", "grey", "black", "white", "yellow")
SYSTEM_PROMPTS = (
    "You are a home-security assistant. Describe camera snapshots precisely: people, vehicles, animals, packages. "
    * 12,
    "You are a support agent for a solar-inverter company. Answer from the manual; cite section numbers. " * 12,
)


def offline(args: argparse.Namespace) -> None:
    trace = (
        [TraceRecord.from_json(line) for line in Path(args.trace).read_text().splitlines() if line.strip()]
        if args.trace
        else synthetic_trace(n_users=args.users, turns=args.turns)
    )
    policies = {
        "round-robin": round_robin(),
        "power-of-two": power_of_two(),
        "consistent-hash": consistent_hash(args.slots),
        "ours": ours(args.slots),
    }
    print(f"{len(trace)} requests on {args.replicas} simulated replicas of {args.slots} slots")
    print(f"{'policy':<16} {'hit rate':>8} {'TTFT p50':>9} {'TTFT p95':>9}  requests per replica")
    for name, policy in policies.items():
        result = simulate(trace, policy, args.replicas, slots=args.slots)
        print(
            f"{name:<16} {result.hit_rate:>8.3f} {result.ttft_p50_s:>8.2f}s {result.ttft_p95_s:>8.2f}s  "
            f"{result.requests_per_replica}"
        )


def live(args: argparse.Namespace, url: str, label: str) -> None:
    """The synthetic users against ``url``; prints hit rate and TTFT p50/p95 per turn."""
    turns: dict[int, list[tuple[float, int, int]]] = {}  # turn -> (ttft_s, cache_n, prompt tokens)
    lock = threading.Lock()

    def user(index: int) -> None:
        system = {"role": "system", "content": SYSTEM_PROMPTS[index % len(SYSTEM_PROMPTS)]}
        messages: list[dict[str, Any]] = [system, {"role": "user", "content": _document(index)}]
        with httpx.Client(base_url=url, timeout=600) as client:
            for turn in range(args.turns):
                if turn:
                    messages.append({"role": "user", "content": f"Question {turn}: what changed since last time?"})
                ttft, text, timings = _streamed(client, messages, args.max_tokens)
                messages.append({"role": "assistant", "content": text})
                with lock:
                    turns.setdefault(turn, []).append(
                        (ttft, timings["cache_n"], timings["cache_n"] + timings["prompt_n"])
                    )
                time.sleep(args.think_s)

    threads = [threading.Thread(target=user, args=(i,)) for i in range(args.users)]
    for thread in threads:
        thread.start()
        time.sleep(args.stagger_s)
    for thread in threads:
        thread.join()
    print(f"{label}: {args.users} users x {args.turns} turns against {url}")
    print(f"{'turn':>4} {'hit rate':>8} {'TTFT p50':>9} {'TTFT p95':>9}")
    for turn, rows in sorted(turns.items()):
        print(f"{turn:>4} {_row(rows)}")
    print(f"{'all':>4} {_row([row for rows in turns.values() for row in rows])}", flush=True)


def _document(index: int) -> str:
    """User ``index``'s first message: a question over a document of their own (what makes affinity pay: on
    another replica it is prefilled again)."""
    lines = [
        f"Camera {index}, event {n}: a person in a {COLOURS[(index + n) % len(COLOURS)]} coat at the gate."
        for n in range(16)
    ]
    return "Here is today's log:\n" + "\n".join(lines) + "\nSummarise it."


def _row(rows: list[tuple[float, int, int]]) -> str:
    ttfts = sorted(row[0] for row in rows)
    hit = sum(row[1] for row in rows) / max(1, sum(row[2] for row in rows))
    p95 = ttfts[min(len(ttfts) - 1, round(0.95 * (len(ttfts) - 1)))]
    return f"{hit:>8.3f} {statistics.median(ttfts):>8.3f}s {p95:>8.3f}s"


def on_ray(args: argparse.Namespace) -> int:
    """``lfmserve serve-ray --replicas 2`` under each router in turn (fresh cluster each), the live replay on each."""
    if not args.no_netns and not os.environ.get(IN_NAMESPACE):
        return in_network_namespace()
    with tempfile.TemporaryDirectory() as tmp:
        model = bench_model() if args.model == "350m" else write_lfm2_gguf(Path(tmp) / "tiny.gguf", TinyLfm2(seed=1))
        flags = ["-m", str(model), "-t", "1", "-np", "2", "-c", str(args.ctx_size), "--no-ui", "--replicas", "2"]
        for repeat in range(args.repeats):
            for router in args.routers.split(","):
                with Server(router, [lfmserve_command(), "serve-ray", *flags, "--router", router]) as url:
                    live(args, url, f"{router} (run {repeat + 1})")
    return 0


def _streamed(
    client: httpx.Client, messages: list[dict[str, Any]], max_tokens: int
) -> tuple[float, str, dict[str, Any]]:
    body = {"messages": messages, "stream": True, "max_tokens": max_tokens, "temperature": 0}
    began, first, parts, timings = time.perf_counter(), None, [], {}
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    first = first or time.perf_counter()
                    parts.append(choice["delta"]["content"])
            timings = chunk.get("timings") or timings
    return (first or time.perf_counter()) - began, "".join(parts), timings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", help="a JSONL trace (lfmserve --trace-requests FILE); default: synthetic")
    parser.add_argument("--replicas", type=int, default=2, help="simulated replicas (offline)")
    parser.add_argument("--slots", type=int, default=2, help="slots per replica (offline)")
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--url", help="replay live against this endpoint instead of simulating")
    parser.add_argument("--label", default="live", help="what to call the live run (e.g. the router)")
    parser.add_argument("--ray", action="store_true", help="live on `lfmserve serve-ray --replicas 2`, per router")
    parser.add_argument("--routers", default="ours,round-robin", help="with --ray: the routers, in turn")
    parser.add_argument("--model", choices=("tiny", "350m"), default="tiny", help="with --ray: the model")
    parser.add_argument("--ctx-size", type=int, default=16384, help="with --ray: -c of each replica")
    parser.add_argument("--repeats", type=int, default=1, help="with --ray: alternations of the routers")
    parser.add_argument("--no-netns", action="store_true", help="with --ray: not in a fresh network namespace")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--think-s", type=float, default=0.5, help="pause between a user's turns (live)")
    parser.add_argument("--stagger-s", type=float, default=0.2, help="between users' starts (live)")
    args = parser.parse_args()
    if args.ray:
        return on_ray(args)
    if args.url:
        live(args, args.url, args.label)
    else:
        offline(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
