"""Memory benchmark: what lfmserve holds resident against llama-server, one model and a router of three.

Servers, all ``-c 4096 -np 2 -t 2`` (``--threads``) on the same file: llama-server as it starts by default
(``-lm auto``: the file mapped), llama-server ``-lm none`` (the weights read into memory), lfmserve by default
(``-lm auto``: mapped, with the pages of the weights llama.cpp repacked given back) and lfmserve ``-lm mmap``
(mapped, nothing given back: what lfmserve did before). Then both again with ``--no-repack``, where llama.cpp
reads every weight from the mapping and the difference is the program's own (Python's share, for lfmserve).
Models: the LFM2-350M-shaped and the LFM2-1.2B-shaped Q4_K_M, random weights written by the project's generator.

Each run starts the server (``load_s``: from the process's start to its first healthy answer), sends one short
chat request, reads the memory of the server and every process under it (``/proc/PID/smaps_rollup``: RSS, its
anonymous and file-backed parts, PSS; the page cache is not counted), then measures decode (a 128-token stream,
``ignore_eos``, tokens per second at the client). Runs alternate which server goes first; figures are medians.

Router: both routers read one preset of three sections of the LFM2-350M-shaped model; after one request to each
model, the memory of the router and all its children.

The first line printed says whether llama.cpp repacks weights on this CPU (llama-server's log names its
``CPU_REPACK`` buffer at ``-lv 4``).

Example::

    python bench/memory_bench.py --llama-server ~/.cache/lfmserve-bench/llama.cpp-build/bin/llama-server
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import (
    Server,
    bench_arguments,
    bench_model,
    bench_model_1_2b,
    lfmserve_command,
    llama_server_binary,
    results_log,
    tree_memory,
)
from router_bench import stream, write_preset

DECODE_TOKENS = 128
SERVERS = {
    "llama-server": ("llama-server", []),
    "llama-server -lm none": ("llama-server", ["-lm", "none"]),
    "lfmserve": ("lfmserve", []),
    "lfmserve -lm mmap": ("lfmserve", ["-lm", "mmap"]),
}
NO_REPACK = {
    "llama-server --no-repack": ("llama-server", ["--no-repack"]),
    "lfmserve --no-repack": ("lfmserve", ["--no-repack"]),
}
METRICS = ("rss_mib", "anonymous_mib", "file_mib", "pss_mib", "load_s", "decode_tok_s")


def one_run(server: Server) -> dict[str, float]:
    with server as url:
        stream(url, None, 8)
        memory = tree_memory(server.process.pid)
        _, arrivals = stream(url, None, DECODE_TOKENS)
        decode = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
    return {**memory, "load_s": server.ready_s, "decode_tok_s": decode}


def router_run(server: Server, models: tuple[str, ...]) -> dict[str, float]:
    with server as url:
        for model in models:
            stream(url, model, 2)
        return tree_memory(server.process.pid)


def cpu_repacks(binary: Path, model: Path, folder: Path) -> bool:
    log = folder / "llama-server.log"
    with Server("llama-server", [str(binary), "-m", str(model), "-c", "512", "-t", "1", "-lv", "4"], log=log):
        pass
    return b"CPU_REPACK model buffer size" in log.read_bytes()


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=4096, repeats=3)
    parser.add_argument("--skip-1-2b", action="store_true", help="only the LFM2-350M-shaped model")
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    programs = {"llama-server": str(binary), "lfmserve": lfmserve_command()}
    models = {"lfm2-350m-shaped": bench_model()}
    if not args.skip_1_2b:
        models["lfm2-1.2b-shaped"] = bench_model_1_2b()
    folder = Path(tempfile.mkdtemp(prefix="memory-bench-"))
    repacks = cpu_repacks(binary, models["lfm2-350m-shaped"], folder)
    print(json.dumps({"cpu_repacks": repacks}), flush=True)
    common = ["-c", str(args.ctx_size), "-np", "2", "-t", str(args.threads)]
    medians: dict[str, dict[str, dict[str, float]]] = {}
    with results_log(args, "memory") as log:

        def record(scenario: str, server: str, result: dict[str, float]) -> None:
            row = json.dumps({"scenario": scenario, "server": server, **result})
            log.write(row + "\n")
            print(row, flush=True)

        for model_name, model in models.items():
            servers = {**SERVERS, **NO_REPACK} if repacks else SERVERS
            runs: dict[str, list[dict[str, float]]] = {}
            for rep in range(args.repeats):
                for name in list(servers) if rep % 2 == 0 else list(servers)[::-1]:
                    program, flags = servers[name]
                    extra = ["--no-ui"] if program == "lfmserve" else []
                    argv = [programs[program], "-m", str(model), *common, *flags, *extra]
                    result = one_run(Server(name, argv))
                    runs.setdefault(name, []).append(result)
                    record(model_name, name, result)
            medians[model_name] = {name: _medians(results) for name, results in runs.items()}
        preset = write_preset(folder, models["lfm2-350m-shaped"], args.ctx_size, args.threads)
        routers: dict[str, list[dict[str, float]]] = {}
        for rep in range(args.repeats):
            for program in list(programs) if rep % 2 == 0 else list(programs)[::-1]:
                extra = ["--no-ui"] if program == "lfmserve" else []
                server = Server(f"{program} router", [programs[program], "--models-preset", str(preset), *extra])
                result = router_run(server, ("a", "b", "c"))
                routers.setdefault(program, []).append(result)
                record("router, three LFM2-350M-shaped", program, result)
        medians["router, three LFM2-350M-shaped"] = {name: _medians(results) for name, results in routers.items()}
    print(report(medians, repacks))
    return 0


def _medians(results: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(result[key] for result in results) for key in results[0]}


def report(medians: dict[str, dict[str, dict[str, float]]], repacks: bool) -> str:
    out = [f"llama.cpp repacks weights on this CPU: {'yes' if repacks else 'no'}", ""]
    for scenario, servers in medians.items():
        keys = [key for key in METRICS if key in next(iter(servers.values()))]
        out += [f"### {scenario}", "", "| server | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
        out += [f"| {name} | " + " | ".join(f"{row[key]:.2f}" for key in keys) + " |" for name, row in servers.items()]
        out += ["", *_ratios(servers), ""]
    return "\n".join(out)


def _ratios(servers: dict[str, dict[str, Any]]) -> list[str]:
    """The ratios the memory issue sets bounds on, for the servers this scenario ran."""
    pairs = [
        ("lfmserve", "llama-server", "rss_mib"),
        ("lfmserve", "llama-server -lm none", "rss_mib"),
        ("lfmserve --no-repack", "llama-server --no-repack", "rss_mib"),
        ("lfmserve", "lfmserve -lm mmap", "load_s"),
        ("lfmserve", "lfmserve -lm mmap", "decode_tok_s"),
        ("lfmserve", "llama-server", "pss_mib"),
    ]
    lines = [
        f"- {ours} / {theirs}, {key}: {servers[ours][key] / servers[theirs][key]:.3f}"
        for ours, theirs, key in pairs
        if ours in servers and theirs in servers and key in servers[ours]
    ]
    if "lfmserve --no-repack" in servers and "llama-server --no-repack" in servers:
        share = servers["lfmserve --no-repack"]["anonymous_mib"] - servers["llama-server --no-repack"]["anonymous_mib"]
        lines.append(f"- lfmserve's own anonymous memory over llama-server's (--no-repack): {share:.0f} MiB")
    return lines


if __name__ == "__main__":
    sys.exit(main())
