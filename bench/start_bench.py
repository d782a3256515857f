"""Start time: seconds from starting a server's process to the answer of a 1-token ``/completion``; and waking.

llama-server, lfmserve, and lfmserve with ``--spec-type ngram-simple`` (which measures what a batch costs before it
serves), each started ``--repeats`` times in turn, quiet and then with ``--busy N`` CPU-bound Python processes
beside it. The speculation run is then left running until it has measured its batch costs (between requests),
and that line (the costs, the draft lengths they make worth verifying) is printed as the server wrote it, so a run
shows whether a busy machine settles on the same policy. Last, quiet, the wake from ``--sleep-idle-seconds 1``:
seconds from ``/props`` saying the server sleeps to the answer of a 1-token completion, llama-server and lfmserve.

Example::

    python bench/start_bench.py --llama-server ~/.cache/lfmserve-bench/llama.cpp-build/bin/llama-server --repeats 5
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import bench_arguments, free_port, lfmserve_command, llama_server_binary, results_log

from lfmserve.testing import gemma3_270m_path, llama_server_weight_flags

SPEC = ["--spec-type", "ngram-simple"]


def time_to_first_answer(argv: list[str], log: Path, *, then_wait_for: str | None = None) -> float:
    """Start ``argv`` on a free port and post a 1-token completion every 10 ms until one is answered; then, if
    ``then_wait_for`` is given, wait until the server's output has a line with it (speculation's costs measured)."""
    port = free_port()
    with log.open("wb") as output:
        started = time.perf_counter()
        process = subprocess.Popen([*argv, "--port", str(port)], stdout=output, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}/completion"
            while True:
                try:
                    reply = httpx.post(url, json={"prompt": "Hi", "n_predict": 1}, timeout=60)
                    if reply.status_code == 200:
                        took = time.perf_counter() - started
                        break
                except httpx.TransportError:
                    pass
                if process.poll() is not None:
                    raise RuntimeError(f"{argv[0]} exited with {process.returncode}: see {log}")
                time.sleep(0.01)
            deadline = time.monotonic() + 300
            while then_wait_for and then_wait_for not in log.read_text(errors="replace"):
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"no line with {then_wait_for!r}: see {log}")
                time.sleep(0.05)
            return took
        finally:
            process.terminate()
            process.wait(timeout=30)


def wake_times(servers: dict[str, list[str]], repeats: int) -> dict[str, list[float]]:
    """Each server started with ``--sleep-idle-seconds 1`` and answered once; then, ``repeats`` times in turn, the
    seconds from the moment ``/props`` says it sleeps to the answer of a 1-token completion (the wake's load)."""
    processes, urls = {}, {}
    for name, argv in servers.items():
        port = free_port()
        processes[name] = subprocess.Popen(
            [*argv, "--sleep-idle-seconds", "1", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        urls[name] = f"http://127.0.0.1:{port}"
    seconds: dict[str, list[float]] = {name: [] for name in servers}
    try:
        for url in urls.values():
            _answer(url)
        for rep in range(repeats):
            for name in list(servers) if rep % 2 == 0 else list(servers)[::-1]:
                while not httpx.get(urls[name] + "/props", timeout=30).json().get("is_sleeping"):
                    time.sleep(0.05)
                started = time.perf_counter()
                _answer(urls[name])
                seconds[name].append(time.perf_counter() - started)
                print(f"wake {name} {seconds[name][-1]:.2f} s", flush=True)
    finally:
        for process in processes.values():
            process.terminate()
            process.wait(timeout=30)
    return seconds


def _answer(url: str) -> None:
    while True:
        try:
            if httpx.post(url + "/completion", json={"prompt": "Hi", "n_predict": 1}, timeout=60).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.01)


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=4096, repeats=5)
    parser.add_argument("--busy", type=int, default=2, help="CPU-bound processes beside the servers in the busy runs")
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    shared = ["-m", str(gemma3_270m_path()), "-c", str(args.ctx_size), "-np", "2", "-t", str(args.threads)]
    servers = {
        "llama-server": [str(binary), *shared, *llama_server_weight_flags()],
        "lfmserve": [lfmserve_command(), *shared],
        "lfmserve --spec-type ngram-simple": [lfmserve_command(), *shared, *SPEC],
    }
    seconds: dict[str, dict[str, list[float]]] = {}
    with results_log(args, "start") as results, tempfile.TemporaryDirectory() as tmp:
        for load in ("quiet", "busy"):
            busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
            if load == "quiet":
                for process in busy:
                    process.kill()
                busy = []
            try:
                for rep in range(args.repeats):
                    names = list(servers) if rep % 2 == 0 else list(servers)[::-1]
                    for name in names:
                        log = Path(tmp) / f"{load}-{rep}-{name.replace(' ', '_')}.log"
                        spec = name.endswith("ngram-simple")
                        took = time_to_first_answer(servers[name], log, then_wait_for="decode costs" if spec else None)
                        seconds.setdefault(load, {}).setdefault(name, []).append(took)
                        results.write(f'{{"load": "{load}", "server": "{name}", "rep": {rep}, "seconds": {took}}}\n')
                        print(f"{load} {name} {took:.2f} s", flush=True)
                        if spec:
                            for line in log.read_text(errors="replace").splitlines():
                                if "decode costs" in line:
                                    print("   ", line.strip())
            finally:
                for process in busy:
                    process.kill()
    woken = wake_times({name: servers[name] for name in ("llama-server", "lfmserve")}, args.repeats)
    print("\n| load | " + " | ".join(servers) + " | spec / plain lfmserve |")
    print("| --- | " + " | ".join("---:" for _ in servers) + " | ---: |")
    for load, by in seconds.items():
        medians = {name: statistics.median(values) for name, values in by.items()}
        ratio = medians["lfmserve --spec-type ngram-simple"] / medians["lfmserve"]
        print(f"| {load} | " + " | ".join(f"{medians[name]:.2f}" for name in servers) + f" | {ratio:.2f} |")
    wake = {name: statistics.median(values) for name, values in woken.items()}
    print(
        f"\nwake from --sleep-idle-seconds (quiet), medians: llama-server {wake['llama-server']:.2f} s, lfmserve "
        f"{wake['lfmserve']:.2f} s ({wake['lfmserve'] / wake['llama-server']:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
