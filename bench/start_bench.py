"""Start time: seconds from starting a server's process to the answer of a 1-token ``/completion``; and waking.

llama-server, lfmserve, and lfmserve with ``--spec-type ngram-simple`` (which measures what a batch costs before it
serves), each started ``--repeats`` times in turn, quiet and then with ``--busy N`` CPU-bound Python processes
beside it. The speculation run is then left running until it has measured its batch costs (between requests),
and that line (the costs, the draft lengths they make worth verifying) is printed as the server wrote it, so a run
shows whether a busy machine settles on the same policy. In a busy run the busy processes then end, and the server
decodes a few replies until it has measured its costs again (its single decodes went back to all the threads), and
that line is printed too: the policy a server started on a busy machine settles on. Last, quiet, the wake from
``--sleep-idle-seconds 1``:
seconds from ``/props`` saying the server sleeps to the answer of a 1-token completion, llama-server and lfmserve.

Example::

    python bench/start_bench.py --llama-server ~/.cache/lfmserve-bench/llama.cpp-build/bin/llama-server --repeats 5
"""

from __future__ import annotations

import functools
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from common import bench_arguments, free_port, lfmserve_command, llama_server_binary, results_log

from lfmserve.testing import gemma3_270m_path, llama_server_weight_flags

SPEC = ["--spec-type", "ngram-simple"]


def time_to_first_answer(
    argv: list[str], log: Path, *, then: Callable[[str, subprocess.Popen[bytes]], None] | None = None
) -> float:
    """Start ``argv`` on a free port and post a 1-token completion every 10 ms until one is answered; then, if
    given, ``then(url, process)`` before the server stops."""
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
            if then is not None:
                then(f"http://127.0.0.1:{port}", process)
            return took
        finally:
            process.terminate()
            process.wait(timeout=30)


def wait_for_lines(
    log: Path, count: int, process: subprocess.Popen[bytes], *, poke: str | None = None, timeout_s: float = 300
) -> bool:
    """Whether the server's output came to have ``count`` lines of measured costs (a table, or linear costs) within
    ``timeout_s`` while it ran; with ``poke`` (its URL), a 64-token completion at a time meanwhile, so that it
    decodes (and its thread tuner tries counts)."""
    deadline = time.monotonic() + timeout_s
    while sum(log.read_text(errors="replace").count(line) for line in COSTS_LINES) < count:
        if time.monotonic() > deadline or process.poll() is not None:
            return False
        if not poke:
            time.sleep(0.05)
            continue
        try:
            body = {"prompt": "Once upon a time", "n_predict": 64}
            httpx.post(poke + "/completion", json=body, timeout=max(deadline - time.monotonic(), 1.0))
        except httpx.HTTPError:
            time.sleep(0.05)  # a timeout, or the server gone: the loop's checks tell
    return True


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


#: What the lines of speculation's measured costs (a table, or linear costs) and of a measurement begun again say.
COSTS_LINES = ("decode costs", "to measure: linear costs")
AGAIN_LINE = "measuring them again"


class BusyProcesses:
    """``n`` CPU-bound processes while the block runs, or until :meth:`end`."""

    def __init__(self, n: int) -> None:
        self._n = n
        self._processes: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> BusyProcesses:
        try:
            for _ in range(self._n):
                self._processes.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        except BaseException:
            self.end()
            raise
        return self

    def end(self) -> bool:
        """Ends them; whether there were any."""
        for process in self._processes:
            process.kill()
            process.wait()
        ended, self._processes = bool(self._processes), []
        return ended

    def __exit__(self, *_: object) -> None:
        self.end()


def _settle(log: Path, busy: BusyProcesses, url: str, process: subprocess.Popen[bytes]) -> None:
    """Until the server has measured its costs; beside busy processes, then also until it has measured them again
    once they ended (the server decoding replies meanwhile), or two minutes have passed."""
    if not wait_for_lines(log, 1, process):
        raise RuntimeError(f"no line of measured costs: see {log}")
    if busy.end() and not wait_for_lines(log, 2, process, poke=url, timeout_s=120):
        print("    (not measured again within two minutes of the busy processes' end)")


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
            for rep in range(args.repeats):
                names = list(servers) if rep % 2 == 0 else list(servers)[::-1]
                for name in names:
                    log = Path(tmp) / f"{load}-{rep}-{name.replace(' ', '_')}.log"
                    spec = name.endswith("ngram-simple")
                    with BusyProcesses(args.busy if load == "busy" else 0) as busy:
                        then = functools.partial(_settle, log, busy) if spec else None
                        took = time_to_first_answer(servers[name], log, then=then)
                    seconds.setdefault(load, {}).setdefault(name, []).append(took)
                    results.write(f'{{"load": "{load}", "server": "{name}", "rep": {rep}, "seconds": {took}}}\n')
                    print(f"{load} {name} {took:.2f} s", flush=True)
                    if spec:
                        for line in log.read_text(errors="replace").splitlines():
                            if any(text in line for text in (*COSTS_LINES, AGAIN_LINE)):
                                print("   ", line.strip())
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
