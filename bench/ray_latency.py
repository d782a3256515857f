"""What Ray Serve's hops cost a streamed answer: lfmserve direct against ``lfmserve serve-ray`` (one replica, the
same model, threads and slots), time to first token and the gaps between tokens, alternating runs.

Through Ray a token travels replica -> ingress (a streaming handle call) -> Serve's HTTP proxy -> client, two
hops more than direct. Both servers run as processes on loopback, one at a time per run; the benchmark
re-runs itself in a fresh network namespace (``unshare -n``, loopback only) so Ray keeps to 127.0.0.1.
Results go to ``bench/results/ray-latency-*.jsonl``; the last line is the summary (medians; ``extra_*`` is
Ray minus direct).

Example::

    python bench/ray_latency.py --model tiny --repeats 6 --tokens 64
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from common import (
    IN_NAMESPACE,
    Runs,
    Server,
    bench_arguments,
    bench_model,
    in_network_namespace,
    lfmserve_command,
    results_log,
    run_interleaved,
)

from lfmserve.testing import TinyLfm2, write_lfm2_gguf


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=2048, repeats=6)
    parser.add_argument("--model", choices=("tiny", "350m"), default="tiny", help="tiny LFM2, or LFM2-350M-shaped")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per streamed answer")
    parser.add_argument("--no-netns", action="store_true", help="run here, not in a fresh network namespace")
    args = parser.parse_args()
    if not args.no_netns and not os.environ.get(IN_NAMESPACE):
        return in_network_namespace()
    with tempfile.TemporaryDirectory() as tmp:
        model = bench_model() if args.model == "350m" else write_lfm2_gguf(Path(tmp) / "tiny.gguf", TinyLfm2(seed=1))
        flags = ["-m", str(model), "-t", str(args.threads), "-np", "2", "-c", str(args.ctx_size), "--no-ui"]
        direct = Server("direct", [lfmserve_command(), *flags])
        ray = Server("ray", [lfmserve_command(), "serve-ray", *flags, "--replicas", "1"])
        runs: Runs = {}
        with results_log(args, "ray-latency") as log, direct as direct_url, ray as ray_url:
            urls = {"direct": direct_url, "ray": ray_url}
            for url in urls.values():
                stream(url, args.tokens)  # warm up: first requests pay for imports and caches
            run_interleaved(urls, ["stream"], args.repeats, lambda url, _, __: stream(url, args.tokens), log, runs)
            summary = summarize(runs, model=args.model, threads=args.threads, tokens=args.tokens)
            log.write(json.dumps(summary) + "\n")
            print(json.dumps(summary), flush=True)
    return 0


def stream(url: str, tokens: int) -> dict[str, Any]:
    """One greedy streamed chat of ``tokens`` tokens: time to first token and the gaps between the rest."""
    body = {
        "messages": [{"role": "user", "content": "Describe the picture."}],
        "stream": True,
        "temperature": 0,
        "max_tokens": tokens,
        "ignore_eos": True,
    }
    arrivals = []
    t0 = time.perf_counter()
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: {") and any(c["delta"].get("content") for c in json.loads(line[6:])["choices"]):
                arrivals.append(time.perf_counter())
    gaps_ms = [1e3 * (b - a) for a, b in zip(arrivals, arrivals[1:], strict=False)]
    return {
        "ttft_ms": 1e3 * (arrivals[0] - t0),
        "gap_p50_ms": statistics.median(gaps_ms),
        "gap_p90_ms": statistics.quantiles(gaps_ms, n=10)[-1],
        "n_events": len(arrivals),
    }


def summarize(runs: Runs, **context: Any) -> dict[str, Any]:
    """Medians over the runs of each server, and Ray's extra over direct."""
    medians = {
        server: {
            key: statistics.median(run[key] for run in results["stream"])
            for key in ("ttft_ms", "gap_p50_ms", "gap_p90_ms")
        }
        for server, results in runs.items()
    }
    extra = {f"extra_{key}": medians["ray"][key] - medians["direct"][key] for key in medians["direct"]}
    return {"summary": True, **context, **{f"{s}_{k}": v for s, m in medians.items() for k, v in m.items()}, **extra}


if __name__ == "__main__":
    sys.exit(main())
