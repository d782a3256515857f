"""llama.cpp's process-wide state: backend initialisation, its log routed to :mod:`logging`, the build linked in."""

from __future__ import annotations

import atexit
import ctypes
import logging
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from importlib.metadata import version
from typing import Any

import llama_cpp.llama_cpp as llama

#: Between DEBUG and INFO: llama.cpp's info lines (its load chatter), which llama-server shows from ``-lv 4``, its
#: trace step (:attr:`~lfmserve.settings.LoggingSettings.level` maps ``-lv 4`` here).
_TRACE = logging.INFO - 5
logging.addLevelName(_TRACE, "TRACE")
# ggml log levels: 1 = debug, 3 = warning, 4 = error; the rest (2 = info, 5 = a continued line) is trace, as
# llama-server's common_log_get_verbosity has them.
_LOG_LEVELS = {1: logging.DEBUG, 3: logging.WARNING, 4: logging.ERROR}
_llama_logger = logging.getLogger("lfmserve.llama_cpp")
logger = logging.getLogger(__name__)
_backend_ready = False
#: ``--numa``'s strategies (ggml's ``enum ggml_numa_strategy``), and the one this process runs with.
NUMA_STRATEGIES = {
    "distribute": llama.GGML_NUMA_STRATEGY_DISTRIBUTE,
    "isolate": llama.GGML_NUMA_STRATEGY_ISOLATE,
    "numactl": llama.GGML_NUMA_STRATEGY_NUMACTL,
}
_numa: str | None = None
#: .errors: a list collecting this thread's llama.cpp errors instead of logging them; .lines: one collecting all of
#: this thread's lines as well as logging them.
_capture = threading.local()


def _log_llama(level: int, text: bytes, _user_data: Any) -> None:
    if not text:
        return
    line = text.decode("utf-8", "replace").rstrip("\n")
    lines: list[str] | None = getattr(_capture, "lines", None)
    if lines is not None:
        lines.append(line)
    errors: list[str] | None = getattr(_capture, "errors", None)
    if errors is not None and level == 4:
        errors.append(line)
        _llama_logger.debug("%s", line)
        return
    _llama_logger.log(_LOG_LEVELS.get(level, _TRACE), "%s", line)


@contextmanager
def _collected(kind: str) -> Iterator[list[str]]:
    """A list that this thread's llama.cpp lines of ``kind`` (``errors``, ``lines``) go to while the block runs."""
    collected: list[str] = []
    setattr(_capture, kind, collected)
    try:
        yield collected
    finally:
        setattr(_capture, kind, None)


def captured_errors() -> AbstractContextManager[list[str]]:
    """llama.cpp's error lines from this thread while the block runs, collected for the caller to report
    (as one error that names the reason) instead of logged one by one."""
    return _collected("errors")


def captured_lines() -> AbstractContextManager[list[str]]:
    """All of llama.cpp's lines from this thread while the block runs (logged as well), for figures that only its
    log gives, such as the sizes of the buffers it allocates."""
    return _collected("lines")


_BUFFER_SIZE = re.compile(r"(\S+)\s+(model|KV|RS|compute|output) buffer size =\s*([\d.]+) MiB")


def buffer_sizes(lines: Sequence[str]) -> dict[str, int]:
    """The bytes of each buffer llama.cpp reported allocating in ``lines``, summed by what it holds: ``CPU_Mapped``
    or ``CPU_REPACK`` weights, ``KV`` cache, ``RS`` (recurrent state), ``compute`` and ``output`` (llama.cpp's own
    breakdown is C++ only; its log has each size to a hundredth of a MiB)."""
    sizes: dict[str, int] = {}
    for line in lines:
        for where, kind, mib in _BUFFER_SIZE.findall(line):
            key = where if kind == "model" else kind
            sizes[key] = sizes.get(key, 0) + round(float(mib) * 2**20)
    return sizes


#: The size a KV cache or recurrent state has, logged as it is planned (also when nothing is allocated: no_alloc).
_PLANNED_SIZE = re.compile(r"(?:llama_kv_cache|llama_memory_recurrent): size =\s*([\d.]+) MiB")


def planned_memory(lines: Sequence[str]) -> int:
    """The bytes of the KV caches and recurrent states a context's lines say it planned: what ``KV`` and ``RS``
    hold once allocated, and the only figure for them when the model was loaded with ``no_alloc``."""
    return sum(round(float(mib) * 2**20) for line in lines for mib in _PLANNED_SIZE.findall(line))


#: llama.cpp's (and mtmd's) log, routed to :mod:`logging`; kept referenced: llama.cpp holds the pointer.
forward_log = llama.llama_log_callback(_log_llama)


def failure_reason(errors: Sequence[str]) -> str:
    """The reason in llama.cpp's error lines: the first specific one, without function names and hints
    (its generic "failed to load" summaries follow the real reason)."""
    for line in errors:
        first = line.strip().splitlines()[0] if line.strip() else ""
        reason = re.sub(r"^(?:[a-z_]+: |error: |error loading model: )+", "", first)
        if reason and not reason.lower().startswith("failed to load"):
            return reason
    return "llama.cpp could not read it"


def init_backend() -> None:
    """Initialise llama.cpp once per process and route its log to :mod:`logging`."""
    global _backend_ready
    if not _backend_ready:
        llama.llama_log_set(forward_log, None)
        llama.llama_backend_init()
        _backend_ready = True


def init_numa(strategy: str) -> None:
    """``--numa``: llama.cpp's NUMA optimisations (``llama_numa_init``, once per process, as ggml keeps the first
    strategy it is given). On a machine of one NUMA node ggml finds nothing to do."""
    global _numa
    init_backend()
    if _numa is None:
        llama.llama_numa_init(NUMA_STRATEGIES[strategy])
        _numa = strategy
    elif strategy != _numa:
        logger.warning("--numa %s ignored: this process already runs with --numa %s", strategy, _numa)


def reclaim_log() -> None:
    """Route llama.cpp's log to :mod:`logging` again, once initialised: llama-cpp-python's high-level API sets its
    own callback when it is imported, which in a process that uses both can happen after lfmserve set up. That
    import also opens two ``/dev/null`` files it never closes (every exit warned "unclosed file"): closed at
    exit."""
    import llama_cpp._utils as high_level_utils

    for null in (high_level_utils.outnull_file, high_level_utils.errnull_file):
        atexit.register(null.close)
    if _backend_ready:
        llama.llama_log_set(forward_log, None)


def build_info() -> str:
    """The llama.cpp build linked in, named by the pinned llama-cpp-python release."""
    return f"llama-cpp-python {version('llama-cpp-python')}"


def unbound_function(name: str, restype: Any, *argtypes: Any) -> Any:
    """A llama.cpp or ggml function llama-cpp-python does not bind, found through libllama's own handle (its
    dependencies are searched too), called as C does. The wheel ships each library as separate files (``libggml.so``,
    ``.so.0``...: a wheel holds no symlinks), so opening one by name maps a second copy, with its own device registry
    and buffer types; through libllama the functions are those of the copy llama.cpp itself uses."""
    return ctypes.CFUNCTYPE(restype, *argtypes)((name, llama._lib))


def llama_build() -> str:
    """The llama.cpp build linked in: its version, and the commit it was built from.

    llama-server prints its build number, compiler and target too, but llama.cpp keeps those in libcommon, which
    llama-cpp-python does not ship. ggml, built from the same tree, is stamped with the same commit, and
    libggml-base exports it.
    """
    commit = unbound_function("ggml_commit", ctypes.c_char_p)().decode()
    return f"llama.cpp {llama.llama_version().decode()}, commit {commit}, through {build_info()}"


def system_info() -> str:
    """What llama.cpp was compiled to use here (its CPU features and backends), as llama-server logs it."""
    info: bytes = llama.llama_print_system_info()
    return info.decode().strip().rstrip("|").strip()


def amx_built_in() -> bool:
    """llama.cpp here was compiled for Intel's AMX tiles (``-march=native`` does that on a CPU that has them).
    Its AMX matrix multiply then takes the quantized weights, and at the pinned commit it crashes the process
    on batches of more than one token (Gemma-3-270M Q4_K_M, a 2-token prompt: SIGSEGV in
    ``ggml_backend_amx_mul_mat``; llama.cpp issue 20824, closed unfixed)."""
    init_backend()
    return b"AMX_INT8 = 1" in llama.llama_print_system_info()
