"""llama.cpp's CPU threadpools, placed as llama-server's ``-C``, ``-Cr``, ``--cpu-strict``, ``--prio`` and ``--poll``
(and their batch and draft forms) place them, and the process priority ``--prio`` also sets.

llama-cpp-python does not wrap ggml's threadpool functions nor ``llama_attach_threadpool``, so they are declared here
with ctypes: ``struct ggml_threadpool_params`` from ``ggml.h`` at the pin, and the functions looked up as
llama-server looks them up (``common_threadpools::init``), through the CPU backend's registry, so that a build whose
CPU backend is a loadable module has them too.

llama-server always attaches a pool for generation, and one for batches when their parameters differ. lfmserve makes
them only when a flag moves a pool from ggml's defaults (any CPU, normal priority, polling level 50): with those
defaults, ggml's own pool made for each graph computes the same way in an OpenMP build (the wheel's), whose threads
are OpenMP's either way. In an OpenMP build, ggml applies a pool's CPUs and priority to each OpenMP thread at the
start of every graph that computes on more than one thread (the caller, which is thread 0, included); a graph on
one thread runs on the caller untouched.

Example::

    pools = Threadpools.placed(4, 8, placement, placement_batch)   # None when both are ggml's defaults
    if pools is not None:
        pools.attach(ctx_handle)   # ... and pools.close() after llama_free
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, Protocol, TypeVar

import llama_cpp.llama_cpp as llama

from .backend import unbound_function

logger = logging.getLogger(__name__)

#: ``GGML_MAX_N_THREADS`` (ggml.h): the CPUs a pool's mask can name.
GGML_MAX_N_THREADS = 512
#: ggml's defaults for a pool (``ggml_threadpool_params_init``): normal priority, hybrid polling, shared mask.
DEFAULT_PRIO = 0
DEFAULT_POLL = 50
#: ``enum ggml_sched_priority``: low, normal, medium, high, realtime.
PRIORITIES = (-1, 0, 1, 2, 3)
#: The nice value llama.cpp's ``set_process_priority`` gives each priority (POSIX).
_NICE = {-1: 5, 0: 0, 1: -5, 2: -10, 3: -20}
_GGML_BACKEND_DEVICE_TYPE_CPU = 0
P = ParamSpec("P")
T = TypeVar("T")


class PoolPlacement(Protocol):
    """One pool's placement (:class:`~lfmserve.engine.records.CpuPlacement`): its CPUs (none: any), whether each
    thread gets one CPU of them (``strict``), its priority and its polling level."""

    @property
    def cpus(self) -> Sequence[int]: ...
    @property
    def strict(self) -> bool: ...
    @property
    def prio(self) -> int: ...
    @property
    def poll(self) -> int: ...


class ThreadpoolParams(ctypes.Structure):
    """``struct ggml_threadpool_params``."""

    _fields_ = [
        ("cpumask", ctypes.c_bool * GGML_MAX_N_THREADS),  # all false: the inherited affinity
        ("n_threads", ctypes.c_int),
        ("prio", ctypes.c_int),  # enum ggml_sched_priority
        ("poll", ctypes.c_uint32),  # 0 no polling ... 100 mostly polling
        ("strict_cpu", ctypes.c_bool),  # thread i on the i-th CPU of the mask
        ("paused", ctypes.c_bool),  # start paused (a generation pool beside a batch pool)
    ]


class _Ggml:
    """The functions llama-cpp-python leaves out, declared once on first use."""

    def __init__(self) -> None:
        params = ctypes.POINTER(ThreadpoolParams)
        self.params_init = unbound_function("ggml_threadpool_params_init", None, params, ctypes.c_int)
        self.params_match = unbound_function("ggml_threadpool_params_match", ctypes.c_bool, params, params)
        by_type = unbound_function("ggml_backend_dev_by_type", ctypes.c_void_p, ctypes.c_int)
        reg_of = unbound_function("ggml_backend_dev_backend_reg", ctypes.c_void_p, ctypes.c_void_p)
        address = unbound_function(
            "ggml_backend_reg_get_proc_address", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p
        )
        device = by_type(_GGML_BACKEND_DEVICE_TYPE_CPU)
        registry = reg_of(device) if device else None
        new = address(registry, b"ggml_threadpool_new") if registry else None
        free = address(registry, b"ggml_threadpool_free") if registry else None
        #: None without a CPU backend (llama-server then warns and makes no pool).
        self.new = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(ThreadpoolParams))(new) if new else None
        self.free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(free) if free else None
        context = llama.llama_context_p_ctypes
        self.attach = unbound_function("llama_attach_threadpool", None, context, ctypes.c_void_p, ctypes.c_void_p)
        self.detach = unbound_function("llama_detach_threadpool", None, context)


_ggml: _Ggml | None = None
_ggml_lock = threading.Lock()


def _functions() -> _Ggml:
    global _ggml
    with _ggml_lock:
        if _ggml is None:
            _ggml = _Ggml()
        return _ggml


def is_default(placement: PoolPlacement) -> bool:
    """Whether ``placement`` is ggml's default pool's: no CPUs named, normal priority, polling 50, not strict."""
    return (
        not placement.cpus
        and not placement.strict
        and placement.prio == DEFAULT_PRIO
        and placement.poll == DEFAULT_POLL
    )


def threadpool_params(n_threads: int, placement: PoolPlacement) -> ThreadpoolParams:
    """The pool's parameters as llama-server's ``ggml_threadpool_params_from_cpu_params`` makes them: ggml's
    defaults for ``n_threads``, then the placement's mask, priority, polling and strictness."""
    params = ThreadpoolParams()
    _functions().params_init(ctypes.byref(params), n_threads)
    for cpu in placement.cpus:
        params.cpumask[cpu] = True
    params.prio = placement.prio
    params.poll = placement.poll % 2**32  # llama-server reads it with stoul into a uint32_t
    params.strict_cpu = placement.strict
    return params


def params_match(params: ThreadpoolParams, other: ThreadpoolParams) -> bool:
    """Whether ggml takes the two for one pool (``ggml_threadpool_params_match``: same size, placement and waiting)."""
    return bool(_functions().params_match(ctypes.byref(params), ctypes.byref(other)))


class Threadpools:
    """A context's pools, for generation and (when placed differently) for batches; freed by :meth:`close`, after
    the context they were attached to."""

    def __init__(self, pool: int, pool_batch: int | None) -> None:
        self.pool, self.pool_batch = pool, pool_batch

    @classmethod
    def placed(
        cls, n_threads: int, n_threads_batch: int, placement: PoolPlacement, placement_batch: PoolPlacement
    ) -> Threadpools | None:
        """The pools for a context of ``n_threads`` (``n_threads_batch`` for batches), as llama-server's
        ``common_threadpools::init`` makes them; None when both placements are ggml's defaults (ggml's own pools
        are then the same) or when ggml cannot make them (said once, as llama-server warns and goes on)."""
        if is_default(placement) and is_default(placement_batch):
            return None
        functions = _functions()
        if functions.new is None or functions.free is None:
            logger.warning("no CPU backend found: the threads keep ggml's default placement")
            return None
        params, params_batch = (
            threadpool_params(n_threads, placement),
            threadpool_params(n_threads_batch, placement_batch),
        )
        _warn_short_mask(n_threads, placement)
        _warn_short_mask(n_threads_batch, placement_batch)
        params.prio, params_batch.prio = _allowed_prio(placement.prio), _allowed_prio(placement_batch.prio)
        pool_batch = None
        if not params_match(params, params_batch):
            pool_batch = functions.new(ctypes.byref(params_batch))
            if not pool_batch:
                logger.warning("batch threadpool create failed : n_threads %d", n_threads_batch)
                return None
            params.paused = True  # as llama-server: the generation pool waits while the batch pool works
        pool = functions.new(ctypes.byref(params))
        if not pool:
            logger.warning("threadpool create failed : n_threads %d", n_threads)
            functions.free(pool_batch)
            return None
        logger.info("llama threadpool init, n_threads = %d%s", n_threads, _described(placement, placement_batch))
        return cls(pool, pool_batch)

    def attach(self, ctx: Any) -> None:
        """Compute ``ctx``'s graphs on these pools (``llama_attach_threadpool``)."""
        _functions().attach(ctx, self.pool, self.pool_batch)

    def detach(self, ctx: Any) -> None:
        _functions().detach(ctx)

    def close(self) -> None:
        """Free the pools (once the context that computed on them is freed or detached)."""
        functions = _functions()
        assert functions.free is not None
        for pool in (self.pool, self.pool_batch):
            if pool:
                functions.free(pool)
        self.pool, self.pool_batch = 0, None


def set_process_priority(prio: int) -> bool:
    """``--prio``: the process's nice value as llama.cpp's ``set_process_priority`` sets it (5, 0, -5, -10, -20 for
    low ... realtime), on each of its threads (Linux keeps one per thread; those started later inherit it). A raise
    the system refuses is a warning, and the process goes on, as llama-server's does."""
    if prio == DEFAULT_PRIO:
        return True
    try:
        tasks = [int(task) for task in os.listdir("/proc/self/task")]
    except OSError:
        tasks = [0]  # elsewhere (macOS) the process's priority is one value
    try:
        for task in tasks:
            try:
                os.setpriority(os.PRIO_PROCESS, task, _NICE[prio])
            except ProcessLookupError:
                continue  # a thread that ended meanwhile
    except OSError as exc:
        logger.warning("failed to set process priority %d : %s (%d)", prio, exc.strerror, exc.errno)
        return False
    return True


def keeps_thread_placement(function: Callable[P, T]) -> Callable[P, T]:
    """``function``, after which the calling thread has its CPUs and scheduling policy back. In an OpenMP build ggml
    gives a pool's CPUs and priority to whichever thread decodes (OpenMP's thread 0): right for the engine's thread,
    not for one that decodes only while loading (a warm-up, speculation's measurements) and then runs other work."""

    @functools.wraps(function)
    def kept(*args: P.args, **kwargs: P.kwargs) -> T:
        if not hasattr(os, "sched_getaffinity"):
            return function(*args, **kwargs)
        cpus, policy, param = os.sched_getaffinity(0), os.sched_getscheduler(0), os.sched_getparam(0)
        try:
            return function(*args, **kwargs)
        finally:
            try:
                os.sched_setscheduler(0, policy, param)
                os.sched_setaffinity(0, cpus)
            except OSError as exc:
                logger.debug("could not put the loading thread's placement back: %s", exc)

    return kept


@functools.cache
def _allowed_prio(prio: int) -> int:
    """``prio``, unless the system refuses it to threads: then normal, said once a process. ggml would otherwise try
    again on every thread of every graph, and print a warning each time it is refused."""
    if prio <= DEFAULT_PRIO or not hasattr(os, "sched_setscheduler"):
        return prio  # low is SCHED_BATCH, which needs no privilege
    refused: list[OSError] = []

    def probe() -> None:  # ggml's policy for medium to realtime, tried on a thread that then ends
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param({1: 40, 2: 80, 3: 90}[prio]))
        except OSError as exc:
            refused.append(exc)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    if not refused:
        return prio
    exc = refused[0]
    logger.warning(
        "failed to set thread priority %d : %s (%d): the threads keep the normal priority (SCHED_FIFO needs "
        "CAP_SYS_NICE or an RLIMIT_RTPRIO)",
        prio,
        exc.strerror,
        exc.errno,
    )
    return DEFAULT_PRIO


def _warn_short_mask(n_threads: int, placement: PoolPlacement) -> None:
    if placement.cpus and len(placement.cpus) < n_threads:  # llama-server's postprocess_cpu_params
        logger.warning(
            "Not enough set bits in CPU mask (%d) to satisfy requested thread count: %d", len(placement.cpus), n_threads
        )


def _described(placement: PoolPlacement, placement_batch: PoolPlacement) -> str:
    def one(p: PoolPlacement) -> str:
        cpus = ",".join(map(str, p.cpus)) if p.cpus else "any"
        return f"CPUs {cpus}, strict {int(p.strict)}, prio {p.prio}, poll {p.poll}"

    batch = "" if placement_batch == placement else f"; batch: {one(placement_batch)}"
    return f" ({one(placement)}{batch})"
