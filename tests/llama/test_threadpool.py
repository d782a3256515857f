"""llama.cpp's threadpools declared with ctypes: the parameters that reach ggml, when pools are made, and where the
threads that decode then run.

The wheel's ggml is built with OpenMP: a pool makes no threads of its own there, and ggml gives its CPUs and
priority to each OpenMP thread of a graph that computes on more than one thread, the decoding thread (OpenMP's
thread 0) included. The decoding here happens on a thread of the test's own, which ends with its OpenMP workers.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import llama_cpp.llama_cpp as llama
import pytest

from lfmserve.engine.records import CpuPlacement
from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel
from lfmserve.llama.threadpool import (
    GGML_MAX_N_THREADS,
    ThreadpoolParams,
    Threadpools,
    _allowed_prio,
    keeps_thread_placement,
    params_match,
    set_process_priority,
    threadpool_params,
)

OPENMP = b"OPENMP = 1" in llama.llama_print_system_info()
CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="a placement shows on a machine of two CPUs or more")
openmp_only = pytest.mark.skipif(not OPENMP, reason="the threads asserted are those of an OpenMP build (the wheel's)")


@pytest.fixture(scope="module")
def model(tiny_gguf: Path) -> Iterator[NativeModel]:
    loaded = NativeModel(tiny_gguf)
    yield loaded
    loaded.close()


def test_the_params_struct_is_ggmls_and_ggml_fills_its_defaults() -> None:
    # 512 bools, an int, an enum, a uint32_t and two bools, padded to the int's alignment.
    assert ctypes.sizeof(ThreadpoolParams) == GGML_MAX_N_THREADS + 3 * 4 + 2 + 2 == 528
    params = threadpool_params(3, CpuPlacement())
    assert (params.n_threads, params.prio, params.poll, params.strict_cpu, params.paused) == (3, 0, 50, False, False)
    assert not any(params.cpumask)


def test_a_placement_reaches_ggmls_params() -> None:
    placement = CpuPlacement(cpus=(1, 70, 511), strict=True, prio=2, poll=-1)
    params = threadpool_params(4, placement)
    assert [cpu for cpu in range(GGML_MAX_N_THREADS) if params.cpumask[cpu]] == [1, 70, 511]
    assert (params.n_threads, params.prio, params.strict_cpu, params.paused) == (4, 2, True, False)
    assert params.poll == 2**32 - 1  # llama-server's stoul of -1, into a uint32_t
    assert params_match(params, threadpool_params(4, placement))
    assert not params_match(params, threadpool_params(5, placement))
    assert not params_match(params, threadpool_params(4, CpuPlacement(cpus=(1, 70), strict=True, prio=2, poll=-1)))


def test_no_pool_is_made_for_ggmls_default_placement() -> None:
    assert Threadpools.placed(2, 4, CpuPlacement(), CpuPlacement()) is None


def test_one_pool_serves_both_when_they_match_as_in_llama_server() -> None:
    placement = CpuPlacement(poll=0)
    shared = Threadpools.placed(2, 2, placement, placement)
    assert shared is not None and shared.pool and shared.pool_batch is None
    shared.close()
    apart = Threadpools.placed(2, 3, placement, placement)  # a batch pool of another size
    assert apart is not None and apart.pool and apart.pool_batch
    apart.close()
    assert (apart.pool, apart.pool_batch) == (0, None)


def test_too_few_cpus_for_the_threads_is_llama_servers_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="lfmserve.llama.threadpool"):
        pools = Threadpools.placed(3, 3, CpuPlacement(cpus=(0,)), CpuPlacement(cpus=(0,)))
    assert pools is not None
    pools.close()
    assert caplog.messages == ["Not enough set bits in CPU mask (1) to satisfy requested thread count: 3"] * 2


def _decoded_on_a_thread(ctx: NativeContext) -> tuple[frozenset[int], list[frozenset[int]]]:
    """The CPUs the decoding thread may run on and those of the threads started while it decoded (its OpenMP
    workers), read from /proc while it still lives; every thread that was there before keeps its CPUs."""
    before = allowed_cpus("/proc/self/task")
    seen: dict[int, frozenset[int]] = {}
    decoding: list[int] = []

    def work() -> None:
        ctx.batch.clear()
        ctx.batch.add([1, 6, 100, 101], 0, 0, True)
        ctx.decode()
        ctx.batch.clear()
        ctx.batch.add([102], 4, 0, True)
        ctx.decode()
        seen.update(allowed_cpus("/proc/self/task"))
        decoding.append(threading.get_native_id())

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert {tid: cpus for tid, cpus in seen.items() if tid in before and before[tid] != cpus} == {}
    return seen[decoding[0]], [cpus for tid, cpus in seen.items() if tid not in before and tid != decoding[0]]


def allowed_cpus(tasks: str) -> dict[int, frozenset[int]]:
    """Each thread under ``tasks`` (``/proc/<pid>/task``) -> the CPUs it may run on (``Cpus_allowed_list``)."""
    out = {}
    for task in os.listdir(tasks):
        try:
            with open(f"{tasks}/{task}/status") as status:
                lines = dict(line.split(":\t", 1) for line in status.read().splitlines() if ":\t" in line)
        except FileNotFoundError:
            continue  # ended meanwhile
        cpus: set[int] = set()
        for part in lines["Cpus_allowed_list"].strip().split(","):
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
        out[int(task)] = frozenset(cpus)
    return out


def _context(model: NativeModel, n_threads: int) -> NativeContext:
    return NativeContext(
        model, n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1, n_threads=n_threads, n_threads_batch=n_threads
    )


@needs_two_cpus
@openmp_only
def test_an_attached_pool_pins_the_decoding_thread_and_its_openmp_worker(model: NativeModel) -> None:
    cpu = CPUS[-1]
    ctx = _context(model, 2)
    ctx.place_threads(CpuPlacement(cpus=(cpu,)), CpuPlacement(cpus=(cpu,)))
    try:
        decoding, others = _decoded_on_a_thread(ctx)
    finally:
        ctx.close()
    assert decoding == {cpu}
    assert others == [{cpu}]  # the one OpenMP worker of the decoding thread's team


@needs_two_cpus
@openmp_only
def test_strict_placement_gives_each_thread_its_own_cpu(model: NativeModel) -> None:
    ctx = _context(model, 2)
    both = CpuPlacement(cpus=tuple(CPUS[:2]), strict=True)
    ctx.place_threads(both, both)
    try:
        decoding, others = _decoded_on_a_thread(ctx)
    finally:
        ctx.close()
    assert decoding == {CPUS[0]}  # thread 0, the caller, on the first CPU of the mask; its worker on the next
    assert others == [{CPUS[1]}]


@needs_two_cpus
@openmp_only
@pytest.mark.parametrize(
    ("n_threads", "placement"),
    [(2, None), (1, CpuPlacement(cpus=(0,)))],
    ids=["no pool", "one thread"],
)
def test_the_threads_keep_their_cpus_without_a_pool_or_on_one_thread(
    model: NativeModel, n_threads: int, placement: CpuPlacement | None
) -> None:
    """Without placement flags nothing changes; and on one thread ggml computes on the caller without applying
    its pool (``ggml_graph_compute``), as llama-server's ``-t 1`` does with this build."""
    ctx = _context(model, n_threads)
    if placement is not None:
        ctx.place_threads(placement, placement)
    try:
        decoding, others = _decoded_on_a_thread(ctx)
    finally:
        ctx.close()
    assert {decoding, *others} == {frozenset(CPUS)}
    assert len(others) == n_threads - 1


@needs_two_cpus
@openmp_only
def test_a_thread_that_decodes_while_loading_gets_its_placement_back(model: NativeModel) -> None:
    cpu = CPUS[-1]
    ctx = _context(model, 2)
    ctx.place_threads(CpuPlacement(cpus=(cpu,)), CpuPlacement(cpus=(cpu,)))
    seen: list[set[int]] = []

    @keeps_thread_placement
    def warm_up() -> None:
        ctx.batch.clear()
        ctx.batch.add([1, 6], 0, 0, True)
        ctx.decode()
        seen.append(os.sched_getaffinity(0))

    def load() -> None:
        warm_up()
        seen.append(os.sched_getaffinity(0))

    thread = threading.Thread(target=load)
    thread.start()
    thread.join()
    ctx.close()
    assert seen == [{cpu}, set(CPUS)]


def _refuse(*args: object) -> None:
    raise PermissionError(1, "Operation not permitted")


def test_a_thread_priority_the_system_refuses_is_one_warning_and_normal_priority(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(os, "sched_setscheduler", _refuse)
    _allowed_prio.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="lfmserve.llama.threadpool"):
            assert (_allowed_prio(2), _allowed_prio(2), _allowed_prio(-1), _allowed_prio(0)) == (0, 0, -1, 0)
    finally:
        _allowed_prio.cache_clear()
    assert caplog.messages == [
        "failed to set thread priority 2 : Operation not permitted (1): the threads keep the normal priority "
        "(SCHED_FIFO needs CAP_SYS_NICE or an RLIMIT_RTPRIO)"
    ]


def test_a_process_priority_the_system_refuses_is_llama_servers_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(os, "setpriority", _refuse)
    with caplog.at_level(logging.WARNING, logger="lfmserve.llama.threadpool"):
        assert set_process_priority(0)  # normal: nothing to set
        assert not set_process_priority(3)
    assert caplog.messages == ["failed to set process priority 3 : Operation not permitted (1)"]
