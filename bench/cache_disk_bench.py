"""The first request after a restart: lfmserve with ``--cache-disk`` against llama-server, which computes the
prompt again.

Both serve the LFM2-350M-shaped Q4_K_M model (``-c 4096 -t 2 -np 1``). The request is a streamed chat under a
system prompt of about 2,000 tokens (Frigate's and Home Assistant's are that long). Each run starts a fresh
server, sends the request once and measures the time to the first content token at the client, then stops the
server; lfmserve's folder was filled once before the runs (one request, then a stop). Medians of ``--repeats``
runs alternating which server goes first.

Example::

    python bench/cache_disk_bench.py --llama-server ~/.cache/lfmserve-bench/llama.cpp-build/bin/llama-server
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from common import Server, bench_arguments, bench_model, lfmserve_command, llama_server_binary, results_log

RULES = [
    f"Rule {i}: describe what the camera sees in one calm sentence, naming people, cars and animals." for i in range(39)
]
BODY: dict[str, Any] = {
    "messages": [{"role": "system", "content": " ".join(RULES)}, {"role": "user", "content": "What is at the door?"}],
    "max_tokens": 4,
    "temperature": 0,
    "stream": True,
    "stream_options": {"include_usage": True},
}


def first_token(url: str) -> tuple[float, int]:
    """Seconds to the first content token, and the prompt's length in tokens."""
    start = time.perf_counter()
    ttft, n_prompt = 0.0, 0
    with httpx.stream("POST", url + "/v1/chat/completions", json=BODY, timeout=300) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if not ttft and any(c["delta"].get("content") for c in chunk["choices"]):
                ttft = time.perf_counter() - start
            if chunk.get("usage"):
                n_prompt = chunk["usage"]["prompt_tokens"]
    return ttft, n_prompt


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=4096, repeats=5)
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    model = bench_model()
    flags = ["-m", str(model), "-c", str(args.ctx_size), "-t", str(args.threads), "-np", "1"]
    folder = Path(tempfile.mkdtemp(prefix="cache-disk-bench-"))
    servers = {
        "llama-server": Server("llama-server", [str(binary), *flags]),
        "lfmserve": Server("lfmserve", [lfmserve_command(), *flags, "--no-ui", "--cache-disk", str(folder)]),
    }
    with servers["lfmserve"] as url:  # fills the folder: one request, then the stop writes the slot
        first_token(url)
    ttfts: dict[str, list[float]] = {name: [] for name in servers}
    with results_log(args, "cache-disk") as log:
        for rep in range(args.repeats):
            for name in list(servers) if rep % 2 == 0 else list(servers)[::-1]:
                with servers[name] as url:
                    ttft, n_prompt = first_token(url)
                ttfts[name].append(ttft)
                row = {"server": name, "rep": rep, "ttft_s": ttft, "prompt_tokens": n_prompt}
                log.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
    medians = {name: statistics.median(values) for name, values in ttfts.items()}
    print("\n| first request after a restart | llama-server | lfmserve --cache-disk | lfmserve / llama-server |")
    print("|---|---|---|---|")
    ratio = medians["lfmserve"] / medians["llama-server"]
    print(f"| TTFT s | {medians['llama-server']:.3f} | {medians['lfmserve']:.3f} | {ratio:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
