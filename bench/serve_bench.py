"""Serving benchmark: lfmserve vs llama-server vs llama-cpp-python's server, side by side in one run.

All three load the same LFM2-350M-shaped Q4_K_M model (random weights, written by
``lfmserve.testing``) with the same context and threads, run one at a time, and answer the same
greedy ``/v1/chat/completions`` streams. Scenarios:

* throughput: 1, 2, 4 and 8 concurrent streams of ``--tokens`` tokens each (aggregate tok/s, TTFT p50/p95);
* inter-token latency p95 of a running stream while another request's long prompt prefills;
* an 8-turn conversation under a ~800-token system prompt (TTFT of each turn);
* the same conversation with its 4 oldest turns trimmed (system message kept);
* 8 users sending the same 2,000-token system prompt at once (TTFT);
* then, with all servers reloaded on the real Gemma-3-270M the tests use, a 5-turn conversation whose
  replies are real text (TTFT of each turn): random weights write replies that do not re-tokenize to
  the generated tokens, so the conversation above recomputes every reply in every server.

Results go to ``bench/results/serve-*.jsonl`` and a markdown table with ratios to llama-server. ``--baseline
DIR`` runs a second lfmserve from another checkout beside the first (a before-and-after in one run), and
``--sampling default`` sends no sampling fields, so each server samples with its default chain.

Example::

    python bench/serve_bench.py --build
    git worktree add /tmp/before HEAD~3
    python bench/serve_bench.py --baseline /tmp/before --scenarios throughput_1 --skip-llama-cpp-python --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from common import (
    Runs,
    Server,
    bench_arguments,
    bench_model,
    lfmserve_command,
    llama_server_binary,
    results_log,
    run_interleaved,
)

from lfmserve.testing import gemma3_270m_path

GREEDY = {"temperature": 0, "top_k": 1, "repeat_penalty": 1.0}
#: What every request sends to choose its sampling: GREEDY, or nothing (``--sampling default``: each server's
#: default chain, with its penalties).
SAMPLING: dict[str, Any] = dict(GREEDY)
WORDS = "the ocean is wide and the waves are blue while the model learns from data about the world".split()


def text(n_words: int, salt: str) -> str:
    return salt + " " + " ".join(WORDS[(i * 7 + len(salt)) % len(WORDS)] for i in range(n_words))


@dataclass
class Stream:
    """One streamed request as the client saw it."""

    t_start: float
    t_tokens: list[float] = field(default_factory=list)
    content: str = ""
    n_tokens: int = 0
    error: str | None = None

    @property
    def ttft(self) -> float:
        return self.t_tokens[0] - self.t_start if self.t_tokens else float("nan")


async def chat(
    client: httpx.AsyncClient, messages: list[dict[str, Any]], max_tokens: int, *, ignore_eos: bool = True
) -> Stream:
    stream = await _chat(client, messages, max_tokens, ignore_eos)
    if stream.error and "RemoteProtocolError" in stream.error and not stream.t_tokens:
        stream = await _chat(client, messages, max_tokens, ignore_eos)  # a kept-alive connection the server had closed
    return stream


async def _chat(client: httpx.AsyncClient, messages: list[dict[str, Any]], max_tokens: int, ignore_eos: bool) -> Stream:
    body = {
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": ignore_eos,
        "stream_options": {"include_usage": True},
        **SAMPLING,
    }
    stream = Stream(time.perf_counter())
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                stream.error = f"HTTP {response.status_code}: {(await response.aread())[:300]!r}"
                return stream
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    stream.n_tokens = chunk["usage"].get("completion_tokens", 0)
                choices = chunk.get("choices") or []
                if choices and "content" in choices[0].get("delta", {}) and choices[0]["delta"]["content"] is not None:
                    stream.t_tokens.append(time.perf_counter())
                    stream.content += choices[0]["delta"]["content"]
                elif choices and choices[0].get("finish_reason") and not stream.t_tokens:
                    stream.t_tokens.append(time.perf_counter())
    except httpx.HTTPError as exc:
        stream.error = repr(exc)
    return stream


def pct(values: list[float], q: float) -> float:
    values = sorted(v for v in values if v == v)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def throughput(client: httpx.AsyncClient, n_streams: int, tokens: int, salt: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    streams = await asyncio.gather(
        *(
            chat(client, [{"role": "user", "content": text(12, f"{salt}user{n_streams}-{i}")}], tokens)
            for i in range(n_streams)
        )
    )
    wall = time.perf_counter() - t0
    ok = [s for s in streams if s.error is None]
    n_tokens = sum(s.n_tokens or len(s.t_tokens) for s in ok)
    return {
        "streams": n_streams,
        "failed": n_streams - len(ok),
        "tok_s": n_tokens / wall,
        "ttft_p50": pct([s.ttft for s in ok], 0.5),
        "ttft_p95": pct([s.ttft for s in ok], 0.95),
    }


async def itl_during_prefill(client: httpx.AsyncClient, prompt_words: int, salt: str) -> dict[str, Any]:
    """Gaps between a running stream's tokens that end while another request's long prompt prefills."""
    running = asyncio.create_task(chat(client, [{"role": "user", "content": text(8, f"{salt}runner")}], 160))
    await asyncio.sleep(1.0)
    t_intruder = time.perf_counter()
    intruder = await chat(client, [{"role": "user", "content": text(prompt_words, f"{salt}intruder")}], 1)
    t_prefilled = t_intruder + intruder.ttft
    stream = await running
    times = stream.t_tokens
    gaps = [b - a for a, b in zip(times, times[1:], strict=False) if t_intruder < b <= t_prefilled + 0.05]
    return {
        "itl_p95": pct(gaps, 0.95),
        "itl_max": max(gaps, default=float("nan")),
        "intruder_ttft": intruder.ttft,
        "failed": int(stream.error is not None or intruder.error is not None),
    }


async def conversation(client: httpx.AsyncClient, args: argparse.Namespace, salt: str) -> dict[str, Any]:
    """A chat with a long system prompt (a RAG preamble): 8 turns, then the 4 oldest turns trimmed."""
    messages = [{"role": "system", "content": text(args.preamble_words, f"{salt}preamble")}]
    ttfts: list[float] = []
    failed = 0
    for i in range(8):
        messages.append({"role": "user", "content": text(40, f"turn{i}")})
        stream = await chat(client, messages, 24)
        failed += stream.error is not None
        ttfts.append(stream.ttft)
        messages.append({"role": "assistant", "content": stream.content})
    trimmed = [messages[0], *messages[9:]]  # the 4 oldest turns dropped, the system message kept
    trimmed.append({"role": "user", "content": text(40, "after-trim")})
    after = await chat(client, trimmed, 24)
    return {
        "turn_ttft": ttfts,
        "turn_ttft_median_2_on": statistics.median(ttfts[1:]),
        "trimmed_ttft": after.ttft,
        "failed": failed + (after.error is not None),
        "errors": [after.error] if after.error else [],
    }


QUESTIONS = (
    "What is the capital of France?",
    "Which river runs through it?",
    "Name a famous museum there.",
    "What is that museum best known for?",
    "And which food is the city famous for?",
)


async def real_conversation(client: httpx.AsyncClient, salt: str) -> dict[str, Any]:
    """Five turns with a real model, whose replies re-tokenize to the tokens it generated (unlike random weights)."""
    messages = [{"role": "system", "content": f"{salt}: you are a helpful assistant who answers in two sentences."}]
    ttfts: list[float] = []
    failed = 0
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        stream = await chat(client, messages, 48, ignore_eos=False)
        failed += stream.error is not None
        ttfts.append(stream.ttft)
        messages.append({"role": "assistant", "content": stream.content})
    return {"turn_ttft": ttfts, "turn_ttft_median_2_on": statistics.median(ttfts[1:]), "failed": failed}


async def shared_system_prompt(client: httpx.AsyncClient, users: int, system_words: int, salt: str) -> dict[str, Any]:
    system = {"role": "system", "content": text(system_words, f"{salt}shared")}
    streams = await asyncio.gather(
        *(chat(client, [system, {"role": "user", "content": text(10, f"u{i}")}], 8) for i in range(users))
    )
    ok = [s for s in streams if s.error is None]
    return {
        "users": users,
        "failed": users - len(ok),
        "ttft_mean": statistics.fmean(s.ttft for s in ok) if ok else float("nan"),
        "ttft_max": max((s.ttft for s in ok), default=float("nan")),
    }


SCENARIOS = ("shared_prompt", "throughput_1", "throughput_2", "throughput_4", "throughput_8", "itl", "conversation")
#: Run on Gemma-3-270M (the real model the tests use), after the others.
REAL_MODEL_SCENARIOS = ("real_conversation",)
#: The name of ``--baseline``'s server.
BASELINE = "lfmserve-baseline"


async def run_scenario(url: str, name: str, args: argparse.Namespace, rep: int) -> dict[str, Any]:
    """One scenario against one server; ``rep`` salts the prompts so no run reuses another's cache."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await chat(client, [{"role": "user", "content": f"warm up {rep}"}], 2)
        if name == "shared_prompt":
            return await shared_system_prompt(client, 8, args.system_words, f"r{rep}")
        if name.startswith("throughput_"):
            return await throughput(client, int(name.split("_")[1]), args.tokens, f"r{rep}")
        if name == "itl":
            return await itl_during_prefill(client, args.intruder_words, f"r{rep}")
        if name == "real_conversation":
            return await real_conversation(client, f"r{rep}")
        return await conversation(client, args, f"r{rep}")


def median_result(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per number, the median over repeats (failures are summed)."""
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        values = [r[key] for r in runs]
        if key == "failed":
            out[key] = sum(values)
        elif isinstance(value, (int, float)):
            out[key] = statistics.median(values)
        else:
            out[key] = values
    return out


SERVE_ROWS = [  # (label, path)
    *[(f"aggregate tok/s, {n} streams", f"throughput_{n}.tok_s") for n in (1, 2, 4, 8)],
    *[(f"TTFT p50 s, {n} streams", f"throughput_{n}.ttft_p50") for n in (1, 4, 8)],
    *[(f"TTFT p95 s, {n} streams", f"throughput_{n}.ttft_p95") for n in (1, 4, 8)],
    ("inter-token latency p95 s during another prompt's prefill", "itl.itl_p95"),
    ("worst inter-token gap s during that prefill", "itl.itl_max"),
    ("multi-turn TTFT s (median of turns 2-8)", "conversation.turn_ttft_median_2_on"),
    ("TTFT s after trimming the oldest turns", "conversation.trimmed_ttft"),
    ("multi-turn TTFT s, real model (median of turns 2-5)", "real_conversation.turn_ttft_median_2_on"),
    ("TTFT s, 8 users sharing a 2,000-token system prompt (mean)", "shared_prompt.ttft_mean"),
    ("failed requests", "failed"),
]


def table(all_results: dict[str, dict[str, Any]], rows: list[tuple[str, str]]) -> str:
    """A markdown table of ``rows`` (label, dotted path into the results), with lfmserve / llama-server."""
    names = list(all_results)
    references = [name for name in ("llama-server", BASELINE) if name in names]
    ratios = " | ".join(f"lfmserve / {name}" for name in references)
    out = [f"| metric | {' | '.join(names)} | {ratios} |", "|---" * (len(names) + len(references) + 1) + "|"]
    for label, path in rows:
        values = [_get(all_results[n], path) for n in names]
        ours = _get(all_results.get("lfmserve", {}), path)
        cells = []
        for name in references:
            ref = _get(all_results[name], path)
            cells.append(f"{ours / ref:.2f}" if ref and ref == ref and ours == ours else "—")
        out.append(f"| {label} | " + " | ".join(_fmt(v) for v in values) + f" | {' | '.join(cells)} |")
    return "\n".join(out)


def _get(results: dict[str, Any], path: str) -> float:
    if path == "failed":
        return float(sum(v.get("failed", 0) for v in results.values() if isinstance(v, dict)))
    node: Any = results
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return float("nan")
        node = node[key]
    return float(node)


def _fmt(value: float) -> str:
    return "—" if value != value else (f"{value:.3f}" if value < 10 else f"{value:.1f}")


def make_servers(model: str, binary: Path, args: argparse.Namespace) -> list[Server]:
    """The servers compared, each loading ``model`` with the same context and threads."""
    flags = ["-m", model, "-c", str(args.ctx_size), "-t", str(args.threads)]
    servers = [
        Server("llama-server", [str(binary), *flags, "--jinja"]),
        Server("lfmserve", [lfmserve_command(), *flags, "--jinja"]),
    ]
    if args.baseline:  # the same entry point, importing lfmserve from the other checkout
        command = ["env", f"PYTHONPATH={args.baseline.resolve()}", lfmserve_command()]
        servers.append(Server(BASELINE, [*command, *flags, "--jinja"]))
    if not args.skip_llama_cpp_python:
        servers.append(
            Server(
                "llama-cpp-python",
                [
                    sys.executable,
                    "-m",
                    "llama_cpp.server",
                    "--model",
                    model,
                    "--n_ctx",
                    str(args.ctx_size),
                    "--n_threads",
                    str(args.threads),
                    "--host",
                    "127.0.0.1",
                ],
                ready_path="/v1/models",
            )
        )
    return servers


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=16384, repeats=2)
    parser.add_argument("--skip-llama-cpp-python", action="store_true", help="leave out llama-cpp-python's server")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per stream in the throughput runs")
    parser.add_argument(
        "--system-words", type=int, default=1500, help="words of the shared system prompt (~2,000 tokens)"
    )
    parser.add_argument("--intruder-words", type=int, default=1200)
    parser.add_argument("--preamble-words", type=int, default=600, help="system prompt words of the conversation")
    parser.add_argument(
        "--scenarios",
        nargs="+",
        choices=SCENARIOS + REAL_MODEL_SCENARIOS,
        default=list(SCENARIOS + REAL_MODEL_SCENARIOS),
        help="(default: all)",
    )
    parser.add_argument(
        "--sampling",
        choices=("greedy", "default"),
        default="greedy",
        help="greedy requests, or none set (each server's default chain)",
    )
    parser.add_argument(
        "--baseline", type=Path, help="another lfmserve checkout (git worktree) to run beside this one, as a ratio"
    )
    args = parser.parse_args()
    if args.sampling == "default":
        SAMPLING.clear()
    binary = llama_server_binary(parser, args)
    runs: Runs = {}
    groups = [(bench_model, SCENARIOS), (gemma3_270m_path, REAL_MODEL_SCENARIOS)]
    with results_log(args, "serve") as log:
        for model, scenarios in groups:
            names = [name for name in args.scenarios if name in scenarios]
            if not names:
                continue
            servers = make_servers(str(model()), binary, args)
            with contextlib.ExitStack() as stack:
                urls = {srv.name: stack.enter_context(srv) for srv in servers}  # all loaded; one is sent work at a time

                def run_one(url: str, name: str, rep: int) -> dict[str, Any]:
                    return asyncio.run(run_scenario(url, name, args, rep))

                run_interleaved(urls, names, args.repeats, run_one, log, runs)
    all_results = {srv: {name: median_result(r) for name, r in by.items()} for srv, by in runs.items()}
    print(table(all_results, SERVE_ROWS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
