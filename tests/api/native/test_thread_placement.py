"""llama-server's thread-placement flags on a real server process: ``--numa``, ``-C`` / ``-Cr``, ``--cpu-strict``,
``--prio`` and the draft model's ``-Cd`` start, serve, and put the threads that decode where they say, as read from
``/proc/<pid>/task/*/status`` and the scheduler.

The wheel's ggml is built with OpenMP: the threads that decode are the engine's thread (OpenMP's thread 0) and the
OpenMP workers of its team, to which ggml gives the threadpool's CPUs and priority as each graph starts. With ``-t 2``
that is two threads; ``--no-warmup`` keeps the loading thread from decoding (and from making a team of its own).
"""

from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import httpx
import llama_cpp.llama_cpp as llama
import pytest

from tests.conftest import Running, wait_healthy
from tests.llama.test_threadpool import allowed_cpus
from tests.test_cli import LFMSERVE

CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
pytestmark = [
    pytest.mark.slow,  # a server process each (about 10 s in all)
    pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads are read from Linux's /proc"),
    pytest.mark.skipif(len(CPUS) < 2, reason="a placement shows on a machine of two CPUs or more"),
    pytest.mark.skipif(
        b"OPENMP = 1" not in llama.llama_print_system_info(),
        reason="the threads asserted are those of an OpenMP build (the wheel's)",
    ),
]
TINY = ["-c", "512", "-np", "1", "--no-warmup"]


@dataclass(frozen=True)
class Task:
    cpus: frozenset[int]
    policy: int
    nice: int


def _serve(running: list[Running], model: Path, *flags: str) -> Running:
    assert LFMSERVE is not None
    server = Running([LFMSERVE, "-m", str(model), *TINY, *flags], cold=True)  # its threads are read
    running.append(server)
    wait_healthy(server.url, server.process)
    reply = httpx.post(server.url + "/completion", json={"prompt": "hello there", "n_predict": 4}, timeout=60)
    assert reply.status_code == 200 and reply.json()["tokens_predicted"] == 4
    return server


def _tasks(server: Running) -> list[Task]:
    tasks = []
    for tid, cpus in allowed_cpus(f"/proc/{server.process.pid}/task").items():
        try:
            tasks.append(Task(cpus, os.sched_getscheduler(tid), os.getpriority(os.PRIO_PROCESS, tid)))
        except (ProcessLookupError, PermissionError):
            continue  # ended meanwhile
    return tasks


def _pinned(tasks: list[Task]) -> list[frozenset[int]]:
    """The CPUs of each thread placed apart from the process's (sorted); every other thread has them all."""
    assert all(task.cpus < set(CPUS) or task.cpus == set(CPUS) for task in tasks)
    return sorted((task.cpus for task in tasks if task.cpus != set(CPUS)), key=sorted)


def _may_raise_priority() -> tuple[bool, bool]:
    """Whether this machine lets a thread take SCHED_FIFO (ggml's policy for --prio 1 to 3) and a lower nice value
    (llama.cpp's process priority), tried on a thread that then ends."""
    allowed: list[bool] = []

    def probe() -> None:
        for attempt in (
            lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(80)),
            lambda: os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10),
        ):
            try:
                attempt()
                allowed.append(True)
            except PermissionError:
                allowed.append(False)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return allowed[0], allowed[1]


def test_a_cpu_mask_pins_the_two_threads_that_decode(running: list[Running], tiny_gguf: Path) -> None:
    cpu = CPUS[-1]
    server = _serve(running, tiny_gguf, "-t", "2", "--cpu-mask", hex(1 << cpu))
    assert _pinned(_tasks(server)) == [{cpu}, {cpu}]
    log = server.log()
    assert "llama threadpool init, n_threads = 2" in log
    assert "Not enough set bits in CPU mask (1) to satisfy requested thread count: 2" in log


def test_without_placement_flags_no_thread_is_placed(running: list[Running], tiny_gguf: Path) -> None:
    server = _serve(running, tiny_gguf, "-t", "2")
    assert _pinned(_tasks(server)) == []
    assert "threadpool" not in server.log()


def test_a_strict_range_and_prio_2_place_each_thread_on_its_cpu_at_high_priority(
    running: list[Running], tiny_gguf: Path
) -> None:
    fifo, nice = _may_raise_priority()
    server = _serve(running, tiny_gguf, "-t", "2", "-Cr", f"{CPUS[0]}-{CPUS[1]}", "--cpu-strict", "1", "--prio", "2")
    tasks = _tasks(server)
    assert _pinned(tasks) == [{CPUS[0]}, {CPUS[1]}]
    placed = [task for task in tasks if task.cpus != set(CPUS)]
    others = [task for task in tasks if task.cpus == set(CPUS)]
    # ggml's thread priority: SCHED_FIFO for the two that decode; llama.cpp's process priority: nice -10 for all.
    assert {task.policy for task in placed} == {os.SCHED_FIFO if fifo else os.SCHED_OTHER}
    assert {task.policy for task in others} == {os.SCHED_OTHER}
    assert {task.nice for task in tasks} == {-10 if nice else 0}
    log = server.log()
    assert ("failed to set thread priority 2" in log) is not fifo
    assert ("failed to set process priority 2" in log) is not nice


@pytest.mark.parametrize(
    ("flags", "environ"), [(["--numa", "distribute"], {}), ([], {"LLAMA_ARG_NUMA": "isolate"})], ids=["flag", "env"]
)
def test_numa_starts_and_serves(
    running: list[Running], tiny_gguf: Path, flags: list[str], environ: dict[str, str]
) -> None:
    assert LFMSERVE is not None
    server = Running([LFMSERVE, "-m", str(tiny_gguf), *TINY, "-t", "1", *flags], env=environ, cold=True)
    running.append(server)
    wait_healthy(server.url, server.process)
    reply = httpx.post(server.url + "/completion", json={"prompt": "hello", "n_predict": 4}, timeout=60)
    assert reply.status_code == 200 and reply.json()["tokens_predicted"] == 4
    assert "llama-server options ignored" not in server.log()


def test_the_draft_models_mask_pins_the_threads_that_draft(running: list[Running], tiny_gguf: Path) -> None:
    """``-Cd`` on the draft model's own context: the target decodes on one thread (which ggml leaves where it is),
    the draft on two, placed."""
    cpu = CPUS[-1]
    flags = ["-t", "1", "--spec-type", "draft-simple", "-md", str(tiny_gguf), "--no-spec-exact", "-td", "2"]
    server = _serve(running, tiny_gguf, *flags, "-Cd", hex(1 << cpu))
    assert _pinned(_tasks(server)) == [{cpu}, {cpu}]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["-C", "0xzz"], "argument -C/--cpu-mask: invalid cpumask '0xzz': invalid hex character 'z' at position 2"),
        (["-Cr", "7"], "argument -Cr/--cpu-range: invalid range '7': expected [<start>]-[<end>]"),
        (["--prio", "9"], "argument --prio: invalid choice: 9 (choose from -1, 0, 1, 2, 3)"),
        (["--numa", "all"], "argument --numa: invalid choice: 'all'"),
    ],
)
def test_a_bad_placement_flag_stops_the_start_with_exit_1(tiny_gguf: Path, flags: list[str], message: str) -> None:
    assert LFMSERVE is not None
    result = subprocess.run(
        [LFMSERVE, "-m", str(tiny_gguf), "--port", "0", *flags], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and message in result.stderr
