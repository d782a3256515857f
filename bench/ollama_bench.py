"""Ollama's streaming cost: tokens per second through ``/api/chat`` (NDJSON) against ``/v1/chat/completions``
(SSE) on the same lfmserve, the same greedy answer, measured at the client.

Before the servers, the CPU each route spends shaping and framing one token (the parsed piece turned into an
NDJSON line or an SSE chunk, in process, 20,000 tokens): the only work that differs between the two routes.

Then one server loads the LFM2-350M-shaped Q4_K_M model (random weights) with ``--parallel 4``. Scenarios, each run
``--repeats`` times alternating which route goes first: one stream, and four streams at once (aggregate). A run
is ``--tokens`` tokens of the same prompt and greedy settings on both routes; tokens per second count from the
first content piece to the last, as the client sees them, and the counts are the servers' own (``usage``,
``eval_count``). The ratio is the median of the per-run ratios (both routes run back to back in each run, so the
machine's drift between runs cancels).

Example::

    python bench/ollama_bench.py --repeats 7
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import httpx
from common import Server, bench_arguments, bench_model, lfmserve_command, results_log

from lfmserve.api.ollama.responses import Reply, chat_lines
from lfmserve.api.openai.protocol import ChatCompletionRequest
from lfmserve.api.openai.responses import chat_chunks
from lfmserve.api.sse import json_line
from lfmserve.chat.output import AssistantOutputParser
from lfmserve.engine.records import EngineOutput, Timings

PROMPT = "Write a long story about the sea, the waves and the ships that sail on them."
ROUTES = ("openai", "ollama")
SCENARIOS = {"1 stream": 1, "4 streams": 4}


SHAPED_TOKENS = 20_000


async def _outputs() -> AsyncIterator[EngineOutput]:
    for i in range(SHAPED_TOKENS):
        finish = "length" if i == SHAPED_TOKENS - 1 else None
        yield EngineOutput(
            text=" word",
            token_ids=(1,),
            id_slot=0,
            n_prompt_tokens=9,
            n_cached_tokens=0,
            n_decoded=i,
            timings=Timings(),
            finish_reason=finish,  # type: ignore[arg-type]
        )


async def _shape(route: str) -> float:
    """Microseconds of CPU per token to shape and frame a stream on ``route``, as the server does."""
    parser = AssistantOutputParser(split_reasoning=True, parse_tool_calls=True)
    start = time.process_time()
    if route == "ollama":
        async for line in chat_lines(Reply("bench"), parser, _outputs()):
            json_line(line)
    else:
        served: Any = SimpleNamespace(model_name="bench", options=SimpleNamespace(fingerprint="b0"))
        body = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "x"}], "stream": True})
        async for chunk in chat_chunks(served, body, parser, _outputs()):
            json_line(chunk)
    return (time.process_time() - start) / SHAPED_TOKENS * 1e6


def shaping_cost(repeats: int) -> dict[str, float]:
    costs: dict[str, list[float]] = {route: [] for route in ROUTES}
    for rep in range(repeats):
        for route in ROUTES if rep % 2 == 0 else ROUTES[::-1]:
            costs[route].append(asyncio.run(_shape(route)))
    return {route: statistics.median(values) for route, values in costs.items()}


def openai_stream(url: str, tokens: int, salt: int) -> tuple[int, float, float]:
    """Tokens generated, and when the first and last content pieces arrived."""
    body = {
        "messages": [{"role": "user", "content": f"{salt} {PROMPT}"}],
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    arrivals: list[float] = []
    count = 0
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if any(choice["delta"].get("content") for choice in chunk["choices"]):
                arrivals.append(time.perf_counter())
            if chunk.get("usage"):
                count = chunk["usage"]["completion_tokens"]
    return count, arrivals[0], arrivals[-1]


def ollama_stream(url: str, tokens: int, salt: int) -> tuple[int, float, float]:
    body = {
        "model": "bench",
        "messages": [{"role": "user", "content": f"{salt} {PROMPT}"}],
        "options": {"num_predict": tokens, "temperature": 0},
    }
    arrivals: list[float] = []
    count = 0
    with httpx.stream("POST", url + "/api/chat", json=body, timeout=300) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            chunk = json.loads(line)
            if chunk["message"]["content"]:
                arrivals.append(time.perf_counter())
            if chunk["done"]:
                count = chunk["eval_count"]
    return count, arrivals[0], arrivals[-1]


def run(url: str, route: str, streams: int, tokens: int, rep: int) -> dict[str, Any]:
    """``streams`` concurrent streams on ``route``: aggregate tokens per second from the first piece to the last."""
    one = openai_stream if route == "openai" else ollama_stream
    with ThreadPoolExecutor(streams) as pool:
        results = list(pool.map(lambda i: one(url, tokens, rep * 10 + i), range(streams)))
    generated = sum(count for count, _, _ in results)
    first, last = min(r[1] for r in results), max(r[2] for r in results)
    return {"tokens": generated, "tok_s": (generated - streams) / (last - first)}


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=4096, repeats=7)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    shaping = shaping_cost(args.repeats)
    print(json.dumps({"shaping_us_per_token": shaping}), flush=True)
    model = bench_model()
    command = [lfmserve_command(), "-m", str(model), "-c", str(args.ctx_size), "-t", str(args.threads), "-np", "4"]
    ratios: dict[str, list[float]] = {name: [] for name in SCENARIOS}
    rates: dict[str, dict[str, list[float]]] = {name: {route: [] for route in ROUTES} for name in SCENARIOS}
    with results_log(args, "ollama") as log, Server("lfmserve", [*command, "--no-ui"]) as url:
        for route in ROUTES:  # warm both paths: the prompt cache, the first stream's allocations
            run(url, route, 1, 8, 99)
        for name, streams in SCENARIOS.items():
            for rep in range(args.repeats):
                order = ROUTES if rep % 2 == 0 else ROUTES[::-1]
                measured = {route: run(url, route, streams, args.tokens, rep) for route in order}
                if measured["openai"]["tokens"] != measured["ollama"]["tokens"]:
                    print(f"different token counts: {measured}", file=sys.stderr)
                    return 1
                for route in ROUTES:
                    rates[name][route].append(measured[route]["tok_s"])
                ratios[name].append(measured["ollama"]["tok_s"] / measured["openai"]["tok_s"])
                row = {"scenario": name, "rep": rep, **{route: measured[route] for route in ROUTES}}
                log.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
    print(f"\nshaping and framing, µs of CPU per token: /v1 {shaping['openai']:.1f}, /api/chat {shaping['ollama']:.1f}")
    print("\n| scenario | /v1/chat/completions tok/s | /api/chat tok/s | /api/chat ÷ /v1 (median of runs) |")
    print("|---|---|---|---|")
    for name in SCENARIOS:
        medians = {route: statistics.median(rates[name][route]) for route in ROUTES}
        ratio = statistics.median(ratios[name])
        print(f"| {name} | {medians['openai']:.1f} | {medians['ollama']:.1f} | {ratio:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
