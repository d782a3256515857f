"""Holding the weights once: the mapped pages of the tensors llama.cpp copied out of the file, released.

With mmap, llama.cpp maps the whole GGUF file and reads each tensor from the mapping, except those it places
in its extra CPU buffer types (repacked into interleaved blocks for faster kernels): those it copies into
anonymous memory, and the mapped pages they came from stay resident beside the copy, never read again. On an
LFM2-350M-shaped Q4_K_M model that is 133 MB of 216 held twice (llama.cpp issue 16761; its open change 24156,
``--reclaim-mmap-source``, does what this module does, inside the loader).

Which tensors were copied is not in llama.cpp's C API, so it is observed: one single-token decode on a
throwaway context, with ggml's evaluation callback, sees every weight the model's graph reads and where its
data lives (through ggml's tensor struct, whose layout is checked against ggml's own accessors once at import,
and each tensor again before its sources are followed). A weight whose data is the file mapping at the tensor's
own offset is read from the file; one elsewhere was copied (a tied embedding is two tensors of one name: it is
copied only if neither reads the file). Only the copied tensors' whole pages inside the file's live shared
read-only mapping get ``MADV_DONTNEED``: a page shared with a tensor still read from the file, a tensor no graph
step showed, and any other mapping are left alone (an address past llama.cpp's own unmapping could by now be
someone else's memory; a private or writable mapping's pages may hold what the file does not). The pages stay in
the page cache; a later read of them would fault them back in, not fail.

Giving the pages back only saves memory: anything on the way that fails (no ``/proc/self/maps``, as on macOS; a
ggml whose struct moved) leaves the mapping as llama.cpp made it, with one warning.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as llama

from ..gguf_split import split_part, split_paths
from .backend import unbound_function

logger = logging.getLogger(__name__)

_GGML_MAX_SRC = 10
_GGML_OP_NONE = 0
_GGML_OP_ADD = 2
_GGML_TYPE_F32 = 0
_MADV_DONTNEED = 4
_PROC_MAPS = "/proc/self/maps"


class _GgmlTensor(ctypes.Structure):
    """The head of ``struct ggml_tensor`` at the pinned commit, up to its name (the fields read here)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * _GGML_MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
    ]


class _GgmlInitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


class _GgufInitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


_p = ctypes.c_void_p
_ggml_init = unbound_function("ggml_init", _p, _GgmlInitParams)
_ggml_free = unbound_function("ggml_free", None, _p)
_ggml_new_tensor_1d = unbound_function("ggml_new_tensor_1d", _p, _p, ctypes.c_int, ctypes.c_int64)
_ggml_add = unbound_function("ggml_add", _p, _p, _p, _p)
_ggml_set_name = unbound_function("ggml_set_name", _p, _p, ctypes.c_char_p)
_ggml_get_name = unbound_function("ggml_get_name", ctypes.c_char_p, _p)
_ggml_get_data = unbound_function("ggml_get_data", _p, _p)
_ggml_op_name = unbound_function("ggml_op_name", ctypes.c_char_p, ctypes.c_int)
_ggml_op_desc = unbound_function("ggml_op_desc", ctypes.c_char_p, _p)
_ggml_nbytes = unbound_function("ggml_nbytes", ctypes.c_size_t, _p)
_gguf_init_from_file = unbound_function("gguf_init_from_file", _p, ctypes.c_char_p, _GgufInitParams)
_gguf_free = unbound_function("gguf_free", None, _p)
_gguf_get_data_offset = unbound_function("gguf_get_data_offset", ctypes.c_size_t, _p)
_gguf_get_n_tensors = unbound_function("gguf_get_n_tensors", ctypes.c_int64, _p)
_gguf_get_tensor_name = unbound_function("gguf_get_tensor_name", ctypes.c_char_p, _p, ctypes.c_int64)
_gguf_get_tensor_offset = unbound_function("gguf_get_tensor_offset", ctypes.c_size_t, _p, ctypes.c_int64)
_gguf_get_tensor_size = unbound_function("gguf_get_tensor_size", ctypes.c_size_t, _p, ctypes.c_int64)


@contextmanager
def _scratch() -> Iterator[int]:
    """A small ggml context, its tensors' data allocated, for tensors ggml itself lays out."""
    context = _ggml_init(_GgmlInitParams(mem_size=16384, mem_buffer=None, no_alloc=False))
    try:
        yield context
    finally:
        _ggml_free(context)


def _layout_problem(layout: type[_GgmlTensor]) -> str | None:
    """What of ``layout`` disagrees with ggml's own accessors on tensors ggml made (None: nothing), for the fields
    read here: a struct copied by hand would otherwise be read wrong, silently, after ggml changed it."""
    with _scratch() as context:
        a, b = (_ggml_new_tensor_1d(context, _GGML_TYPE_F32, 4) for _ in range(2))
        total = _ggml_set_name(_ggml_add(context, a, b), b"layout probe")
        leaf, node = layout.from_address(a), layout.from_address(total)
        ops = (_ggml_op_name(_GGML_OP_NONE), _ggml_op_name(_GGML_OP_ADD)) == (_ggml_op_desc(a), _ggml_op_desc(total))
        agree = {
            "name": node.name == _ggml_get_name(total) == b"layout probe",
            "data": (leaf.data, node.data) == (_ggml_get_data(a), _ggml_get_data(total)) and node.data is not None,
            "op": ops and (leaf.op, node.op) == (_GGML_OP_NONE, _GGML_OP_ADD),
            "src": list(node.src[:3]) == [a, b, None],
        }
    wrong = [field for field, right in agree.items() if not right]
    return f"ggml's accessors disagree with lfmserve's struct ggml_tensor on its {', '.join(wrong)}" if wrong else None


#: Checked once: a layout that ggml disagrees with is never followed.
_LAYOUT_PROBLEM = _layout_problem(_GgmlTensor)


def _checked(address: int) -> _GgmlTensor:
    """The tensor at ``address``, once ggml's accessors agree with the layout on its name and data (before its
    sources, which have no accessor, are followed)."""
    tensor = _GgmlTensor.from_address(address)
    if tensor.name != _ggml_get_name(address) or tensor.data != _ggml_get_data(address):
        raise RuntimeError(f"ggml's accessors disagree with lfmserve's struct ggml_tensor at {address:#x}")
    return tensor


class _GraphWeights:
    """ggml's evaluation callback over one decode: the addresses of the data of every weight the graph reads, by
    tensor name (every one: a tied embedding is two tensors of one name, its input's and its output's)."""

    def __init__(self) -> None:
        self.addresses: dict[str, set[int]] = {}
        self.problem: str | None = None

    def observe(self, node: int, _ask: bool, _user_data: Any) -> bool:
        if self.problem is None:
            try:
                for source in _checked(node).src:
                    if source:
                        self._record(source)
            except Exception as exc:  # an exception cannot cross into ggml: kept, raised when the decode returns
                self.problem = str(exc)
        return False  # no node's data is wanted: the graph runs unsplit

    def _record(self, address: int) -> None:
        tensor = _checked(address)
        if tensor.op == _GGML_OP_NONE and tensor.data and _ggml_nbytes(address):
            self.addresses.setdefault(tensor.name.decode("utf-8", "replace"), set()).add(tensor.data)


@dataclass(frozen=True, slots=True)
class _FileTensor:
    path: str
    offset: int
    size: int


def _file_tensors(path: str) -> dict[str, _FileTensor]:
    """Every tensor of the model's GGUF file (and of its other splits): where its data starts in which file."""
    part = split_part(path)
    files = split_paths(part.prefix, part.count) if part else [path]
    tensors: dict[str, _FileTensor] = {}
    for file in files:
        gguf = _gguf_init_from_file(file.encode(), _GgufInitParams(no_alloc=True, ctx=None))
        if not gguf:
            raise RuntimeError(f"ggml could not read {file}")
        try:
            start = _gguf_get_data_offset(gguf)
            real = os.path.realpath(file)
            for i in range(_gguf_get_n_tensors(gguf)):
                name = _gguf_get_tensor_name(gguf, i).decode()
                offset = start + _gguf_get_tensor_offset(gguf, i)
                tensors[name] = _FileTensor(real, offset, _gguf_get_tensor_size(gguf, i))
        finally:
            _gguf_free(gguf)
    return tensors


def _graph_weights(model: Any) -> dict[str, set[int]]:
    """The addresses of the data of every weight one decoded token reads, by tensor name."""
    observed = _GraphWeights()
    callback = llama.ggml_backend_sched_eval_callback(observed.observe)
    params = llama.llama_context_default_params()
    params.n_ctx = 256
    params.n_batch = params.n_ubatch = params.n_outputs_max = 1  # the smallest compute buffer
    params.n_seq_max = 1
    params.n_threads = params.n_threads_batch = 1
    params.cb_eval = callback
    params.no_perf = True
    context = llama.llama_init_from_model(model, params)
    if not context:
        raise RuntimeError("llama.cpp could not make the context that observes the graph")
    try:
        token = (llama.llama_token * 1)(max(llama.llama_vocab_bos(llama.llama_model_get_vocab(model)), 0))
        if llama.llama_decode(context, llama.llama_batch_get_one(token, 1)) != 0:
            raise RuntimeError("llama.cpp could not decode the token that observes the graph")
    finally:
        llama.llama_free(context)
    if observed.problem is not None:
        raise RuntimeError(observed.problem)
    return observed.addresses


@dataclass(frozen=True, slots=True)
class _Mapping:
    start: int
    end: int
    #: The address the file's first byte would have: ``start`` less the offset it maps from.
    base: int


def _file_mappings(paths: set[str], maps: Iterable[str]) -> dict[str, list[_Mapping]]:
    """The shared read-only mappings of ``paths`` among ``maps`` (``/proc/self/maps``' lines): what is left of
    llama.cpp's (after it unmapped their ends). Another mapping's pages may hold what the file does not: a
    private one's copies, a writable one's writes."""
    mappings: dict[str, list[_Mapping]] = {}
    for line in maps:
        fields = line.split(maxsplit=5)
        shared_read_only = len(fields) == 6 and fields[1].startswith("r-") and fields[1].endswith("s")
        if shared_read_only and fields[5].rstrip("\n") in paths:
            start, end = (int(part, 16) for part in fields[0].split("-"))
            mapping = _Mapping(start, end, start - int(fields[2], 16))
            mappings.setdefault(fields[5].rstrip("\n"), []).append(mapping)
    return mappings


def _copied_ranges(
    weights: dict[str, set[int]], tensors: dict[str, _FileTensor], mappings: dict[str, list[_Mapping]]
) -> Iterator[tuple[int, int]]:
    """The page-aligned address ranges, inside the file's live mapping, of each run of copied tensors that lie
    next to each other in the file (so the page between two of them goes too)."""
    page = os.sysconf("SC_PAGE_SIZE")
    bases: dict[str, int] = {}
    for name, addresses in weights.items():
        tensor = tensors.get(name)
        if tensor is None:
            continue
        for mapping in mappings.get(tensor.path, []):
            in_file = mapping.base + tensor.offset
            if mapping.start <= in_file < mapping.end and in_file in addresses:
                bases[tensor.path] = mapping.base  # read from the file: this mapping is the model's
    runs: list[tuple[str, int, int]] = []
    for name, tensor in sorted(tensors.items(), key=lambda item: (item[1].path, item[1].offset)):
        base = bases.get(tensor.path)
        copied = base is not None and name in weights and base + tensor.offset not in weights[name]
        if not copied:
            runs.append((tensor.path, 0, 0))  # a tensor read from the file (or unseen) ends a run
        elif runs and runs[-1][0] == tensor.path and runs[-1][2]:
            runs[-1] = (tensor.path, runs[-1][1], tensor.offset + tensor.size)
        else:
            runs.append((tensor.path, tensor.offset, tensor.offset + tensor.size))
    for path, first, last in runs:
        if last == 0:
            continue
        start, end = bases[path] + -(-first // page) * page, bases[path] + last // page * page
        for mapping in mappings[path]:
            low, high = max(start, mapping.start), min(end, mapping.end)
            if mapping.base == bases[path] and high > low:
                yield low, high


def _ranges_to_release(model: Any, path: str) -> Iterator[tuple[int, int]]:
    """The address ranges of the mapped pages of ``model``'s copied weights (:func:`_copied_ranges`)."""
    if _LAYOUT_PROBLEM is not None:
        raise RuntimeError(_LAYOUT_PROBLEM)
    weights = _graph_weights(model)
    tensors = _file_tensors(path)
    with open(_PROC_MAPS) as maps:
        mappings = _file_mappings({tensor.path for tensor in tensors.values()}, maps)
    return _copied_ranges(weights, tensors, mappings)


def release_copied_weights(model: Any, path: str | Path) -> int:
    """Give back the mapped pages of the weights llama.cpp copied into other buffers; the bytes released.

    ``model`` is a ``llama_model *`` loaded from ``path`` with mmap; called once, before it serves. Whatever fails
    on the way is one warning, and the pages not yet released stay mapped: still what the file holds.
    """
    released = 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        for start, end in _ranges_to_release(model, str(path)):
            if libc.madvise(start, end - start, _MADV_DONTNEED) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"madvise: {os.strerror(errno)}")
            released += end - start
    except Exception as exc:  # giving pages back only saves memory: no failure of it may fail the load
        logger.warning("the mapped weights llama.cpp copied stay held twice (%d bytes released): %s", released, exc)
    return released
