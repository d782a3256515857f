"""Holding the weights once: the mapped pages of the tensors llama.cpp copied out of the file, released.

With mmap, llama.cpp maps the whole GGUF file and reads each tensor from the mapping, except those it places
in its extra CPU buffer types (repacked into interleaved blocks for faster kernels): those it copies into
anonymous memory, and the mapped pages they came from stay resident beside the copy, never read again. On an
LFM2-350M-shaped Q4_K_M model that is 133 MB of 216 held twice (llama.cpp issue 16761; its open change 24156,
``--reclaim-mmap-source``, does what this module does, inside the loader).

Which tensors were copied is not in llama.cpp's C API, so it is observed: one single-token decode on a
throwaway context, with ggml's evaluation callback, sees every weight the model's graph reads and where its
data lives. A weight whose data is the file mapping at the tensor's own offset is read from the file; one
elsewhere was copied. Only the copied tensors' whole pages inside the live mapping get ``MADV_DONTNEED``:
a page shared with a tensor still read from the file, a tensor no graph step showed, and anything that is not
that file's mapping are left alone (an address past llama.cpp's own unmapping could by now be someone else's
memory). The pages stay in the page cache; a later read of them would fault them back in, not fail.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as llama
from llama_cpp._ctypes_extensions import load_shared_library

logger = logging.getLogger(__name__)

_GGML_MAX_SRC = 10
_GGML_OP_NONE = 0
_MADV_DONTNEED = 4
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


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


class _GgufInitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


@functools.cache
def _ggml() -> Any:
    """libggml-base, for ``ggml_nbytes`` and the GGUF reader (llama-cpp-python binds neither)."""
    lib = load_shared_library("ggml-base", llama._base_path)
    lib.ggml_nbytes.argtypes = [ctypes.c_void_p]
    lib.ggml_nbytes.restype = ctypes.c_size_t
    lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, _GgufInitParams]
    lib.gguf_init_from_file.restype = ctypes.c_void_p
    lib.gguf_free.argtypes = [ctypes.c_void_p]
    lib.gguf_get_data_offset.argtypes = [ctypes.c_void_p]
    lib.gguf_get_data_offset.restype = ctypes.c_size_t
    lib.gguf_get_n_tensors.argtypes = [ctypes.c_void_p]
    lib.gguf_get_n_tensors.restype = ctypes.c_int64
    lib.gguf_get_tensor_name.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.gguf_get_tensor_name.restype = ctypes.c_char_p
    lib.gguf_get_tensor_offset.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.gguf_get_tensor_offset.restype = ctypes.c_size_t
    lib.gguf_get_tensor_size.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.gguf_get_tensor_size.restype = ctypes.c_size_t
    return lib


@dataclass(frozen=True, slots=True)
class _FileTensor:
    path: str
    offset: int
    size: int


def _file_tensors(path: str) -> dict[str, _FileTensor]:
    """Every tensor of the model's GGUF file (and of its other splits): where its data starts in which file."""
    ggml = _ggml()
    split = _SPLIT.search(path)
    files = (
        [_SPLIT.sub(f"-{i:05d}-of-{split.group(2)}.gguf", path) for i in range(1, int(split.group(2)) + 1)]
        if split
        else [path]
    )
    tensors: dict[str, _FileTensor] = {}
    for file in files:
        gguf = ggml.gguf_init_from_file(file.encode(), _GgufInitParams(no_alloc=True, ctx=None))
        if not gguf:
            continue
        try:
            start = ggml.gguf_get_data_offset(gguf)
            real = os.path.realpath(file)
            for i in range(ggml.gguf_get_n_tensors(gguf)):
                name = ggml.gguf_get_tensor_name(gguf, i).decode()
                offset = start + ggml.gguf_get_tensor_offset(gguf, i)
                tensors[name] = _FileTensor(real, offset, ggml.gguf_get_tensor_size(gguf, i))
        finally:
            ggml.gguf_free(gguf)
    return tensors


def _graph_weights(model: Any) -> dict[str, int]:
    """The address of the data of every weight one decoded token reads, by tensor name."""
    ggml = _ggml()
    seen: dict[str, int] = {}

    def observe(node: int, _ask: bool, _user_data: Any) -> bool:
        for source in _GgmlTensor.from_address(node).src:
            if source:
                tensor = _GgmlTensor.from_address(source)
                if tensor.op == _GGML_OP_NONE and tensor.data and ggml.ggml_nbytes(source):
                    seen.setdefault(tensor.name.decode("utf-8", "replace"), tensor.data)
        return False  # no node's data is wanted: the graph runs unsplit

    callback = llama.ggml_backend_sched_eval_callback(observe)
    params = llama.llama_context_default_params()
    params.n_ctx = 256
    params.n_batch = params.n_ubatch = params.n_outputs_max = 1  # the smallest compute buffer
    params.n_seq_max = 1
    params.n_threads = params.n_threads_batch = 1
    params.cb_eval = callback
    params.no_perf = True
    context = llama.llama_init_from_model(model, params)
    if not context:
        return {}
    try:
        token = (llama.llama_token * 1)(max(llama.llama_vocab_bos(llama.llama_model_get_vocab(model)), 0))
        if llama.llama_decode(context, llama.llama_batch_get_one(token, 1)) != 0:
            return {}
    finally:
        llama.llama_free(context)
    return seen


@dataclass(frozen=True, slots=True)
class _Mapping:
    start: int
    end: int
    #: The address the file's first byte would have: ``start`` less the offset it maps from.
    base: int


def _file_mappings(paths: set[str]) -> dict[str, list[_Mapping]]:
    """This process's mappings of ``paths`` (what is left of them after llama.cpp unmapped their ends)."""
    mappings: dict[str, list[_Mapping]] = {}
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].rstrip("\n") in paths:
                start, end = (int(part, 16) for part in fields[0].split("-"))
                mapping = _Mapping(start, end, start - int(fields[2], 16))
                mappings.setdefault(fields[5].rstrip("\n"), []).append(mapping)
    return mappings


def _copied_ranges(
    weights: dict[str, int], tensors: dict[str, _FileTensor], mappings: dict[str, list[_Mapping]]
) -> Iterator[tuple[int, int]]:
    """The page-aligned address ranges, inside the file's live mapping, of each run of copied tensors that lie
    next to each other in the file (so the page between two of them goes too)."""
    page = os.sysconf("SC_PAGE_SIZE")
    bases: dict[str, int] = {}
    for name, address in weights.items():
        tensor = tensors.get(name)
        if tensor is None:
            continue
        for mapping in mappings.get(tensor.path, []):
            if mapping.start <= address < mapping.end and address == mapping.base + tensor.offset:
                bases[tensor.path] = mapping.base  # read from the file: this mapping is the model's
    runs: list[tuple[str, int, int]] = []
    for name, tensor in sorted(tensors.items(), key=lambda item: (item[1].path, item[1].offset)):
        base = bases.get(tensor.path)
        copied = base is not None and name in weights and weights[name] != base + tensor.offset
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


def release_copied_weights(model: Any, path: str | Path) -> int:
    """Give back the mapped pages of the weights llama.cpp copied into other buffers; the bytes released.

    ``model`` is a ``llama_model *`` loaded from ``path`` with mmap; called once, before it serves.
    """
    weights = _graph_weights(model)
    tensors = _file_tensors(str(path))
    mappings = _file_mappings({tensor.path for tensor in tensors.values()})
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    released = 0
    for start, end in _copied_ranges(weights, tensors, mappings):
        if libc.madvise(start, end - start, _MADV_DONTNEED) == 0:
            released += end - start
        else:
            logger.warning("madvise of a copied weight's pages failed: %s", os.strerror(ctypes.get_errno()))
    return released
