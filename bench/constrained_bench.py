"""Constrained decoding against plain, quiet and with a busy loop beside the server: lfmserve and llama-server.

Gemma-3-270M (the PyPI package's Q4_K_M) answers the same chat four ways, greedy, ``--n-predict`` tokens: plain
text, a ``json_schema`` response format, a forced tool call (``tool_choice: required``) and ``auto`` with tools.
Each is timed from the server's own ``timings`` (decode tok/s). Then the same runs with one busy Python loop
beside the server on the machine's cores: the ratios constrained / plain, quiet and busy, say whether the
constraint itself collapses under load or decoding does (issue 52 reported constrained 20x slower than plain).
lfmserve runs twice: as it starts by default (its thread count adapts to the load) and with
``--no-adaptive-threads`` (``-t`` threads always, as llama-server and lfmserve before it).

Example::

    python bench/constrained_bench.py --llama-server ~/.cache/lfmserve-bench/llama.cpp-build/bin/llama-server
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from typing import Any

import httpx
from common import Server, bench_arguments, lfmserve_command, llama_server_binary, results_log, run_interleaved

from lfmserve.testing import gemma3_270m_path

SCHEMA = {
    "type": "object",
    "properties": {
        "fruits": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["name", "qty"],
            },
        }
    },
    "required": ["fruits"],
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add_fruits",
            "parameters": {"type": "object", "properties": {"names": {"type": "array", "items": {"type": "string"}}}},
        },
    }
]
KINDS: dict[str, dict[str, Any]] = {
    "plain": {},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "fruits", "schema": SCHEMA}}},
    "tool_required": {"tools": TOOLS, "tool_choice": "required"},
    "tool_auto": {"tools": TOOLS, "tool_choice": "auto"},
}


def decode_rate(url: str, kind: str, n_predict: int) -> dict[str, Any]:
    body = {
        "messages": [{"role": "user", "content": "List twenty fruits, with a quantity for each, as JSON."}],
        "max_tokens": n_predict,
        "temperature": 0,
        **KINDS[kind],
    }
    answer = httpx.post(url + "/v1/chat/completions", json=body, timeout=900)
    answer.raise_for_status()
    timings = answer.json()["timings"]
    return {"tokens": timings["predicted_n"], "decode_tok_s": timings["predicted_per_second"]}


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=4096, repeats=3)
    parser.add_argument("--n-predict", type=int, default=128)
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    model = str(gemma3_270m_path())
    shared = ["-m", model, "-c", str(args.ctx_size), "-np", "1", "-t", str(args.threads)]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with (
        results_log(args, "constrained_bench") as log,
        Server("lfmserve", [lfmserve_command(), *shared]) as ours,
        Server("lfmserve -t fixed", [lfmserve_command(), *shared, "--no-adaptive-threads"]) as fixed,
        Server("llama-server", [str(binary), *shared, "--jinja"]) as theirs,
    ):
        urls = {"lfmserve": ours, "lfmserve -t fixed": fixed, "llama-server": theirs}
        for load in ("quiet", "busy"):
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load == "busy" else None
            try:
                for rep in range(args.repeats):
                    # Each repeat walks the kinds and the servers in another order: no kind or server always
                    # runs first after the busy loop starts.
                    scenarios = [f"{load}/{kind}" for kind in _rotated(list(KINDS), rep)]
                    run_interleaved(
                        dict(_rotated(list(urls.items()), rep)),
                        scenarios,
                        1,
                        lambda url, name, _: decode_rate(url, name.split("/")[1], args.n_predict),
                        log,
                        runs,
                    )
            finally:
                if busy is not None:
                    busy.kill()
    print("\n| server | load | " + " | ".join(KINDS) + " | constrained / plain (json_schema, tool_required) |")
    print("| --- | --- | " + " | ".join("---" for _ in KINDS) + " | --- |")
    for server, by_scenario in runs.items():
        for load in ("quiet", "busy"):
            rate = {kind: statistics.median(r["decode_tok_s"] for r in by_scenario[f"{load}/{kind}"]) for kind in KINDS}
            ratios = f"{rate['json_schema'] / rate['plain']:.2f}, {rate['tool_required'] / rate['plain']:.2f}"
            print(f"| {server} | {load} | " + " | ".join(f"{rate[k]:.1f}" for k in KINDS) + f" | {ratios} |")
    return 0


def _rotated(items: list[Any], n: int) -> list[Any]:
    return items[n % len(items) :] + items[: n % len(items)]


if __name__ == "__main__":
    sys.exit(main())
