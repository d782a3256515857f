"""Side-by-side single-stream benchmark: lfmserve vs llama-server from the same llama.cpp, one run.

Both servers load the same LFM2-350M-shaped Q4_K_M model (random weights, written by
``lfmserve.testing``) with the same flags, run one at a time on the same cores, and answer the same
``/completion`` requests. Reported as JSON lines and a markdown table, with lfmserve / llama-server
ratios:

* decode tok/s: one stream generating ``--n-predict`` tokens (ignore_eos), measured by the client
  from the first to the last streamed token;
* prefill tok/s: a fresh ``--prompt-tokens`` prompt (cache_prompt off) divided by the time to its
  first token.

llama-server comes from the llama.cpp vendored in the pinned llama-cpp-python sdist; ``--build``
downloads that sdist from PyPI and builds it (about 10 minutes on 2 cores), or pass ``--llama-server``.

Example::

    python bench/compare_llama_server.py --build --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
from common import Server, bench_arguments, bench_model, lfmserve_command, llama_server_binary, results_log


def stream_completion(url: str, body: dict[str, Any]) -> tuple[float, list[float], dict[str, Any]]:
    """(start time, arrival time of each streamed token, final chunk)."""
    arrivals: list[float] = []
    final: dict[str, Any] = {}
    t0 = time.perf_counter()
    with httpx.stream("POST", url + "/completion", json={**body, "stream": True}, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("stop"):
                final = chunk
            else:  # one chunk per token (a random model's tokens often have empty text)
                arrivals.append(time.perf_counter())
    return t0, arrivals, final


def prompt_text(n_tokens: int, salt: int) -> str:
    """A prompt of about n_tokens (the random model's merges are learnt from English)."""
    words = "the ocean is wide and the waves are blue and the model learns from data".split()
    return f"{salt} " + " ".join(words[i % len(words)] for i in range(n_tokens))


#: Sent to both servers, so both run the same sampler chain: the seed's LFM2.5 instruct settings, greedy.
SAMPLING = {"temperature": 0, "top_k": 50, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.05, "repeat_last_n": 64}


def measure(url: str, args: argparse.Namespace, run: int) -> Iterator[dict[str, Any]]:
    decode_body = {
        "prompt": prompt_text(16, run),
        "n_predict": args.n_predict,
        **SAMPLING,
        "ignore_eos": True,
        "cache_prompt": False,
    }
    t0, arrivals, final = stream_completion(url, decode_body)
    yield {
        "metric": "decode_tok_s",
        "value": (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]),
        "server_reported": final["timings"]["predicted_per_second"],
    }
    prefill_body = {
        "prompt": prompt_text(args.prompt_tokens, 1000 + run),
        "n_predict": 1,
        **SAMPLING,
        "cache_prompt": False,
    }
    t0, arrivals, final = stream_completion(url, prefill_body)
    first = arrivals[0] if arrivals else time.perf_counter()
    n_prompt = final["tokens_evaluated"]
    yield {
        "metric": "prefill_tok_s",
        "value": n_prompt / (first - t0),
        "n_prompt": n_prompt,
        "server_reported": final["timings"]["prompt_per_second"],
    }


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=4096, repeats=5)
    parser.add_argument("--n-predict", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    model = bench_model()
    flags = ["-m", str(model), "-c", str(args.ctx_size), "-t", str(args.threads)]
    servers = [
        Server("llama-server", [str(binary), *flags]),
        Server("lfmserve", [lfmserve_command(), *flags]),
    ]
    results: dict[str, dict[str, list[float]]] = {s.name: {} for s in servers}
    log = results_log(args, "compare")
    for run in range(args.repeats):  # alternate the servers so drift in the machine hits both alike
        for server in servers:
            with server as url:
                if run == 0:
                    list(measure(url, args, -1))  # warm-up: page in the weights
                for row in measure(url, args, run):
                    row.update(server=server.name, run=run)
                    log.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
                    results[server.name].setdefault(row["metric"], []).append(row["value"])
    log.close()
    print(f"\n| metric (median of {args.repeats}) | llama-server | lfmserve | ratio |")
    print("| --- | --- | --- | --- |")
    for metric in ("decode_tok_s", "prefill_tok_s"):
        ref = statistics.median(results["llama-server"][metric])
        ours = statistics.median(results["lfmserve"][metric])
        print(f"| {metric} | {ref:.1f} | {ours:.1f} | {ours / ref:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
