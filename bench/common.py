"""Shared by the benchmarks: the model they run, llama-server built from the pinned sdist, server processes."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import httpx
import numpy as np

from lfmserve.llama.quantize import quantize_q4_k_m
from lfmserve.testing import (
    TinyLfm2,
    free_port,
    lfm2_1_2b_shape,
    lfm2_350m_shape,
    lfm2_vl_450m_projector,
    llama_server_weight_flags,
    tiny_reranker,
    write_lfm2_gguf,
    write_mmproj_gguf,
)

PINNED = "llama-cpp-python==0.3.36"
CACHE = Path(os.environ.get("LFMSERVE_BENCH_CACHE", Path.home() / ".cache" / "lfmserve-bench"))


def bench_model(*, vision_tokens: bool = False) -> Path:
    """The LFM2-350M-shaped Q4_K_M model (with LFM2-VL's image tokens if asked), made once and cached."""
    name = "lfm2-vl-350m-random" if vision_tokens else "lfm2-350m-random"
    return _cached_q4_k_m(name, replace(lfm2_350m_shape(seed=0), vision_tokens=vision_tokens))


def tiny_model() -> Path:
    """The tests' tiny random LFM2 (F16, a few MB), made once and cached: a decode takes well under a millisecond,
    so what a server adds to each token shows."""
    target = CACHE / "lfm2-tiny-random-F16.gguf"
    if not target.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        write_lfm2_gguf(target, TinyLfm2())
    return target


def bench_model_1_2b() -> Path:
    """The LFM2-1.2B-shaped Q4_K_M model, made once and cached (about 700 MB; writing it takes minutes)."""
    return _cached_q4_k_m("lfm2-1.2b-random", lfm2_1_2b_shape(seed=0))


def _cached_q4_k_m(name: str, shape: TinyLfm2) -> Path:
    target = CACHE / f"{name}-Q4_K_M.gguf"
    if not target.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        f16 = CACHE / f"{name}-F16.gguf"
        print(f"writing {f16.name} ...", file=sys.stderr)
        write_lfm2_gguf(f16, shape)
        quantize_q4_k_m(f16, target)
        f16.unlink()
    return target


def bench_reranker() -> Path:
    """A reranker shaped like Qwen3-Reranker-0.6B (28 attention layers, 1024 wide; a 32k vocabulary here),
    random weights with the tiny reranker's template and two-label head, Q4_K_M, made once and cached."""
    target = CACHE / "qwen3-reranker-0.6b-random-Q4_K_M.gguf"
    if not target.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        f16 = CACHE / "qwen3-reranker-0.6b-random-F16.gguf"
        print(f"writing {f16.name} ...", file=sys.stderr)
        shape = replace(tiny_reranker(seed=0), n_embd=1024, n_ff=3072, n_head=16, n_head_kv=8, n_merges=2000)
        layers = (True,) * 28
        write_lfm2_gguf(
            f16, replace(shape, attention_layers=layers, n_vocab=32768, weight_scale=0.02, dtype=np.float16)
        )
        quantize_q4_k_m(f16, target)
        f16.unlink()
    return target


def bench_projector() -> Path:
    """The projector shaped like LFM2-VL-450M's (F16, random weights), made once and cached."""
    target = CACHE / "mmproj-lfm2-vl-450m-random-F16.gguf"
    if not target.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        print(f"writing {target.name} ...", file=sys.stderr)
        partial = target.with_suffix(".partial")
        write_mmproj_gguf(partial, lfm2_vl_450m_projector(seed=0))
        partial.rename(target)
    return target


def build_llama_server() -> Path:
    """Build llama-server from the pinned llama-cpp-python sdist's vendored llama.cpp."""
    binary = CACHE / "llama.cpp-build" / "bin" / "llama-server"
    if binary.exists():
        return binary
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", PINNED, "-d", tmp],
            check=True,
        )
        sdist = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(sdist) as archive:
            archive.extractall(tmp, filter="data")
        source = next(Path(tmp).glob("llama_cpp_python-*/vendor/llama.cpp"))
        build = CACHE / "llama.cpp-build"
        subprocess.run(
            [
                "cmake",
                "-S",
                str(source),
                "-B",
                str(build),
                "-DCMAKE_BUILD_TYPE=Release",
                "-DLLAMA_BUILD_SERVER=ON",
                "-DLLAMA_BUILD_TESTS=OFF",
                "-DLLAMA_BUILD_EXAMPLES=OFF",
                "-DLLAMA_CURL=OFF",
                "-DLLAMA_OPENSSL=OFF",
            ],
            check=True,
        )
        subprocess.run(
            ["cmake", "--build", str(build), "--target", "llama-server", "-j", str(os.cpu_count() or 2)], check=True
        )
    return binary


@dataclass
class Server:
    name: str
    argv: list[str]
    #: Polled until it answers 200 (llama-cpp-python's server has no /health).
    ready_path: str = "/health"
    #: Where the server's output goes (none kept without it).
    log: Path | None = None

    def __enter__(self) -> str:
        self.port = free_port()
        # llama-server loads weights as lfmserve does by default (where llama.cpp was built for AMX: not repacked).
        weights = list(llama_server_weight_flags()) if self.name.startswith("llama-server") else []
        output = self.log.open("wb") if self.log else subprocess.DEVNULL
        started = time.perf_counter()
        self.process = subprocess.Popen(
            [*self.argv, *weights, "--port", str(self.port)], stdout=output, stderr=subprocess.STDOUT
        )
        url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + self.ready_path, timeout=2).status_code == 200:
                    #: Seconds from the process's start to its first healthy answer.
                    self.ready_s = time.perf_counter() - started
                    return url
            except httpx.TransportError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}")
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} did not become healthy")

    def __exit__(self, *_: Any) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def tree_memory(pid: int) -> dict[str, float]:
    """Resident memory in MiB of ``pid`` and every process under it, from ``/proc/PID/smaps_rollup``: RSS, its
    anonymous and file-backed parts, and PSS (shared pages split among the processes that map them). Pages only
    in the page cache are not counted: no process holds them, and the kernel drops them under pressure."""
    pids, totals = [pid], {"Rss": 0, "Anonymous": 0, "Pss": 0}
    while pids:
        current = pids.pop()
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
                key, _, rest = line.partition(":")
                if key in totals:
                    totals[key] += int(rest.split()[0])
            pids += [
                int(c) for t in Path(f"/proc/{current}/task").iterdir() for c in (t / "children").read_text().split()
            ]
    return {
        "rss_mib": totals["Rss"] / 1024,
        "anonymous_mib": totals["Anonymous"] / 1024,
        "file_mib": (totals["Rss"] - totals["Anonymous"]) / 1024,
        "pss_mib": totals["Pss"] / 1024,
    }


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system, every thread) a process has used so far, from ``/proc/PID/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pids: Iterable[int], *, timeout_s: float = 120.0) -> float:
    """Wait until the servers ``pids`` sit idle (under 2% of a core each over half a second), and say how long it
    took: what a server does after its first healthy answer (lfmserve's speculation measures its batch costs
    between requests) must not run beside another server's measured requests."""
    pids, started = list(pids), time.monotonic()
    while time.monotonic() - started < timeout_s:
        before = [cpu_seconds(pid) for pid in pids]
        time.sleep(0.5)
        if all(cpu_seconds(pid) - b < 0.01 for pid, b in zip(pids, before, strict=True)):
            break
    return time.monotonic() - started


def lfmserve_command() -> str:
    return shutil.which("lfmserve") or "lfmserve"


def bench_arguments(description: str, *, ctx_size: int, repeats: int) -> argparse.ArgumentParser:
    """The flags every benchmark takes: which llama-server, the shared server flags, repeats, where results go."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-server", type=Path, help="llama-server binary (default: build it with --build)")
    parser.add_argument("--build", action="store_true", help="build llama-server from the pinned sdist if needed")
    parser.add_argument("--repeats", type=int, default=repeats, help="runs per server (medians reported)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx-size", type=int, default=ctx_size)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    return parser


def llama_server_binary(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
    """``--llama-server``, or the one ``--build`` makes; without either, a usage error."""
    binary = args.llama_server or (build_llama_server() if args.build else None)
    if binary is None or not Path(binary).exists():
        parser.error("pass --llama-server PATH or --build")
    return Path(binary)


def results_log(args: argparse.Namespace, name: str) -> TextIO:
    """A new JSON-lines file for this run's results, named by the benchmark and the time."""
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    return (out / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl").open("w")


Runs = dict[str, dict[str, list[dict[str, Any]]]]


def run_interleaved(
    urls: dict[str, str],
    scenarios: Iterable[str],
    repeats: int,
    run_one: Callable[[str, str, int], dict[str, Any]],
    log: TextIO,
    runs: Runs,
) -> None:
    """Run every scenario ``repeats`` times on every server, into ``runs[server][scenario]``.

    Scenario by scenario, so the machine's drift hits every server alike, and alternating which server
    goes first. ``run_one(url, scenario, rep)`` gives one run's numbers, each logged as a JSON line.
    """
    names = list(urls)
    for name in scenarios:
        for rep in range(repeats):
            for server in names if rep % 2 == 0 else names[::-1]:
                result = run_one(urls[server], name, rep)
                runs.setdefault(server, {}).setdefault(name, []).append(result)
                row = json.dumps({"server": server, "scenario": name, "rep": rep, **result})
                log.write(row + "\n")
                print(row, flush=True)


#: Set in a benchmark's re-run inside a fresh network namespace (see :func:`in_network_namespace`).
IN_NAMESPACE = "LFMSERVE_BENCH_NETNS"


def in_network_namespace() -> int:
    """Run this benchmark again under ``unshare -n`` with loopback up, so Ray keeps to 127.0.0.1 (it rewrites
    127.0.0.1 to the machine's address when it can reach one); the re-run sees :data:`IN_NAMESPACE` set."""
    if shutil.which("unshare") is None:
        print(f"{Path(sys.argv[0]).name}: needs unshare (or pass --no-netns)", file=sys.stderr)
        return 1
    script = 'ip link set lo up && exec "$@"'
    argv = ["unshare", "-n", "sh", "-c", script, "sh", sys.executable, *sys.argv]
    return subprocess.call(argv, env={**os.environ, IN_NAMESPACE: "1", "RAY_USAGE_STATS_ENABLED": "0"})
