"""Router benchmark: lfmserve's router against llama-server's, on the same preset of three models.

Both routers read one preset: three sections (``a``, ``b``, ``c``) of the LFM2-350M-shaped Q4_K_M model (``--model
tiny``: the tests' tiny random LFM2, whose decode is so quick that the relay's own cost shows), one slot each.
Measured, each median of ``--repeats`` runs alternating which server goes first:

- **cold start**: a model is unloaded (``POST /models/unload``, then polled until ``unloaded``), then the time from
  sending a streamed chat for it to its first content token, the load included (after one unmeasured cold start
  per router: the first load after lfmserve's router starts also waits for its fork server's imports), with its
  phases from the router's ``/models/sse`` events, read as the request runs: to the ``loading`` event (the router
  started the child) and to the ``loaded`` event (the child is ready), and for lfmserve from its router's log, to
  the child's ``listening on`` line (forked, its settings and app built) and ``server is ready`` line (loaded and
  warmed up);
- **decode**: tokens per second of one 128-token stream (``ignore_eos``; 1,024 tokens on the tiny model, whose 128
  take under a tenth of a second, too short to time), measured at the client, through each
  router and from the same model served alone by the same program (``-m``), so the router's cost shows; the
  router's cost is the median of the per-run ratios (router and alone run back to back in each run, so the
  machine's drift between runs, often 20% here, cancels);
- **the relay's CPU**: the CPU time (user and system) of the router's own process, not its children's, over each
  timed stream through it, per token: what the relay of a token costs, which on 2 cores is taken from the child's
  decode, and which the machine's drift moves far less than it moves a speed;
- **memory**: with all three models loaded, the resident (RSS) and proportional (PSS, shared pages split among
  the processes that map them) memory of the router and every process under it.

Example::

    python bench/router_bench.py --llama-server ~/.cache/lfmserve-bench/llama.cpp-build/bin/llama-server
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from common import (
    Server,
    bench_arguments,
    bench_model,
    cpu_seconds,
    lfmserve_command,
    llama_server_binary,
    results_log,
    tiny_model,
    tree_memory,
)

MODELS = ("a", "b", "c")
#: Tokens per timed stream, by model: long enough (half a second and more) that the scheduler's jitter averages out.
DECODE_TOKENS = {"lfm2-350m-shaped": 128, "tiny": 1024}


def write_preset(folder: Path, model: Path, ctx_size: int, threads: int) -> Path:
    preset = folder / "preset.ini"
    sections = "".join(f"[{name}]\nmodel = {model}\n\n" for name in MODELS)
    preset.write_text(f"version = 1\n\n[*]\nctx-size = {ctx_size}\nthreads = {threads}\nparallel = 1\n\n{sections}")
    return preset


def stream(url: str, model: str | None, max_tokens: int) -> tuple[float, list[float]]:
    """Seconds to the first content token, and the arrival time of every content chunk."""
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Write about the sea."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    if model:
        body["model"] = model
    start = time.perf_counter()
    arrivals: list[float] = []
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if any(c["delta"].get("content") for c in chunk.get("choices", [])):
                    arrivals.append(time.perf_counter())
    return arrivals[0] - start, arrivals


def status(url: str, model: str) -> str:
    entries = httpx.get(url + "/models", timeout=30).json()["data"]
    return str(next(e for e in entries if e["id"] == model)["status"]["value"])


def unload(url: str, model: str) -> None:
    if status(url, model) != "unloaded":
        httpx.post(url + "/models/unload", json={"model": model}, timeout=30)
        while status(url, model) != "unloaded":
            time.sleep(0.05)


def cold_start(url: str, log: Path | None = None) -> dict[str, float]:
    """Seconds from sending a streamed chat for the unloaded model ``a`` to the router's ``loading`` event (it started
    the child), to its ``loaded`` event (the child is ready) and to the answer's first content token; with the
    router's ``log`` (lfmserve's), also to the child's ``listening`` and ``server is ready`` lines."""
    unload(url, "a")
    phases: dict[str, float] = {}
    with httpx.stream("GET", url + "/models/sse", timeout=60) as events:  # subscribed: its headers are in
        arrivals: list[float] = []
        request = threading.Thread(target=lambda: arrivals.extend(stream(url, "a", 4)[1]))
        start, start_wall = time.perf_counter(), time.time()
        request.start()
        for line in events.iter_lines():
            event = json.loads(line[6:]) if line.startswith("data: {") else {}
            status = event.get("data", {}).get("status") if event.get("model") == "a" else None
            if status in ("loading", "loaded"):
                phases.setdefault(f"cold_to_{status}_s", time.perf_counter() - start)
            if status == "loaded":
                break
        request.join()
    if log is not None:
        phases.update(child_lines(log, start_wall))
    return {**phases, "cold_start_s": arrivals[0] - start}


#: The child's own lines that mark its start (its log's timestamps have milliseconds).
CHILD_LINES = {"cold_to_child_listening_s": "[a] lfmserve: listening on", "cold_to_child_ready_s": "server is ready"}


def child_lines(log: Path, since: float) -> dict[str, float]:
    """Seconds from ``since`` (the wall clock) to the first of each of :data:`CHILD_LINES` logged after it."""
    found: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        if "[a] " not in line:
            continue
        try:
            logged = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue
        if logged < since - 0.001:  # milliseconds, truncated
            continue
        for metric, text in CHILD_LINES.items():
            if text in line:
                found.setdefault(metric, logged - since)
    return found


def decode(url: str, model: str | None, tokens: int, pid: int) -> tuple[float, float]:
    """Tokens per second of one stream, and the CPU microseconds process ``pid`` (the router) spent per token."""
    stream(url, model, 8)  # warm: loaded, prompt cached
    cpu_before = cpu_seconds(pid)
    _, arrivals = stream(url, model, tokens)
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]), (cpu_seconds(pid) - cpu_before) / len(arrivals) * 1e6


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=4096, repeats=5)
    parser.add_argument(
        "--model", choices=("lfm2-350m-shaped", "tiny"), default="lfm2-350m-shaped", help="the preset's model"
    )
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    model = tiny_model() if args.model == "tiny" else bench_model()
    folder = Path(tempfile.mkdtemp(prefix="router-bench-"))
    preset = write_preset(folder, model, args.ctx_size, args.threads)
    direct = ["-m", str(model), "-c", str(args.ctx_size), "-t", str(args.threads), "-np", "1"]
    routers = {
        "llama-server router": Server("llama-server router", [str(binary), "--models-preset", str(preset)]),
        "lfmserve router": Server(
            "lfmserve router",
            [lfmserve_command(), "--models-preset", str(preset), "--no-ui"],
            log=folder / "lfmserve-router.log",
        ),
    }
    alone = {
        "llama-server alone": Server("llama-server alone", [str(binary), *direct]),
        "lfmserve alone": Server("lfmserve alone", [lfmserve_command(), *direct, "--no-ui"]),
    }
    results: dict[str, dict[str, list[float]]] = {}
    with results_log(args, "router") as log, contextlib.ExitStack() as stack:
        urls = {name: stack.enter_context(server) for name, server in {**routers, **alone}.items()}

        def record(server: str, metric: str, value: float) -> None:
            results.setdefault(server, {}).setdefault(metric, []).append(value)
            row = json.dumps({"server": server, "metric": metric, "value": value})
            log.write(row + "\n")
            print(row, flush=True)

        for name in routers:  # once unmeasured: lfmserve's fork server finishes its imports (a second, once)
            cold_start(urls[name])
        for rep in range(args.repeats):
            order = list(routers) if rep % 2 == 0 else list(routers)[::-1]
            for name in order:
                for metric, seconds in cold_start(urls[name], routers[name].log).items():
                    record(name, metric, seconds)
        for rep in range(args.repeats):
            names = list(urls) if rep % 2 == 0 else list(urls)[::-1]
            servers = {**routers, **alone}
            speeds: dict[str, float] = {}
            for name in names:
                model_name = "a" if name in routers else None
                speed, cpu_us = decode(urls[name], model_name, DECODE_TOKENS[args.model], servers[name].process.pid)
                record(name, "decode_tok_s", speed)
                if name in routers:
                    record(name, "router_cpu_us_per_token", cpu_us)
                speeds[name] = speed
            for program in ("llama-server", "lfmserve"):  # within one run: the drift between runs cancels
                ratio = speeds[f"{program} router"] / speeds[f"{program} alone"]
                record(f"{program} router", "decode_vs_alone", ratio)
        for name in routers:
            for model_name in MODELS:
                stream(urls[name], model_name, 2)
            memory = tree_memory(routers[name].process.pid)
            for key in ("rss_mib", "pss_mib"):
                record(name, key, memory[key])
    print(report({server: {k: statistics.median(v) for k, v in by.items()} for server, by in results.items()}))
    return 0


def report(medians: dict[str, dict[str, float]]) -> str:
    ours, theirs = medians["lfmserve router"], medians["llama-server router"]
    rows = [
        ("cold start s (request for an unloaded model to its first token)", "cold_start_s"),
        ("cold start: request to the router's `loading` event s (the child started)", "cold_to_loading_s"),
        (
            "cold start: request to the child's `listening on` line s (forked, its settings and app built)",
            "cold_to_child_listening_s",
        ),
        ("cold start: request to the child's `server is ready` line s (loaded, warmed up)", "cold_to_child_ready_s"),
        ("cold start: request to the router's `loaded` event s (the child ready)", "cold_to_loaded_s"),
        ("decode tok/s through the router", "decode_tok_s"),
        ("router process's CPU µs per relayed token", "router_cpu_us_per_token"),
        ("RSS MiB, router and three loaded children", "rss_mib"),
        ("PSS MiB, router and three loaded children", "pss_mib"),
    ]
    out = ["| metric | llama-server | lfmserve | lfmserve / llama-server |", "|---|---|---|---|"]
    for label, key in rows:
        if key not in theirs:  # lfmserve's child's own lines: llama-server's router has none to match
            out.append(f"| {label} | — | {ours[key]:.3f} | — |")
            continue
        out.append(f"| {label} | {theirs[key]:.3f} | {ours[key]:.3f} | {ours[key] / theirs[key]:.2f} |")
    ratios = [medians[f"{program} router"]["decode_vs_alone"] for program in ("llama-server", "lfmserve")]
    label = "decode through the router / the same program alone (median of per-run ratios)"
    out.append(f"| {label} | {ratios[0]:.3f} | {ratios[1]:.3f} | — |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
