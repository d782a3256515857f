"""``--control-vector``: directions added to each layer's output, read from GGUF files and set on a context.

The rules are llama.cpp's ``common_control_vector_load`` and ``common_control_vector_load_one``
(``common/common.cpp``, which the wheel does not ship). A file holds 1-D F32 tensors named ``direction.N``, N the
layer (from 1: llama.cpp never adds a vector after layer 0), all of one width; each is scaled by its file's scale
and summed into one array of ``n_embd`` floats per layer, layer 1 first, as long as the highest layer named. Several
files are summed the same way. Any file llama-server would skip (unreadable, no direction tensors, a tensor not
named ``direction.N``, N 0, not F32, not 1-D, or widths that differ) stops the start here, as it stops
llama-server's. ``llama_set_adapter_cvec`` then checks the width against the model's and copies the layers it has
(1 to ``n_layer - 1``) onto the context.

Example::

    vector = load_control_vectors([("happy.gguf", 0.8), ("calm.gguf", 0.5)])
    apply_control_vector(ctx, vector, layer_range=None)  # llama-server's default: layers 1 to n_layer
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp.llama_cpp as llama
import numpy as np
import numpy.typing as npt

from ..c_numbers import leading_int
from ..errors import EngineError
from .context import NativeContext


@dataclass(frozen=True, slots=True)
class ControlVector:
    """The summed directions: ``n_embd`` floats per layer, layer 1 first (``data[:n_embd]`` is layer 1's)."""

    n_embd: int
    data: npt.NDArray[np.float32]

    @property
    def n_layers(self) -> int:
        """The highest layer any file named (the array's length in layers)."""
        return len(self.data) // self.n_embd


def load_control_vectors(files: Sequence[tuple[str, float]]) -> ControlVector:
    """The files' directions, each scaled by its scale, summed as ``common_control_vector_load`` sums them. Raises
    :class:`EngineError` naming the file for anything llama-server would refuse to start with."""
    if not files:
        raise EngineError("no control vector files passed")
    result: ControlVector | None = None
    for path, scale in files:
        one = _load_one(path, scale)
        if result is None:
            result = one
            continue
        if one.n_embd != result.n_embd:
            raise EngineError(
                f"control vector {path}: its width {one.n_embd} does not match the previous files' {result.n_embd}"
            )
        data = np.zeros(max(len(result.data), len(one.data)), dtype=np.float32)  # extend if necessary
        data[: len(result.data)] = result.data
        data[: len(one.data)] += one.data
        result = ControlVector(result.n_embd, data)
    assert result is not None
    return result


def apply_control_vector(ctx: NativeContext, vector: ControlVector, layer_range: tuple[int, int] | None) -> None:
    """Set ``vector`` on ``ctx`` for the layers ``layer_range`` names, both ends included (a start or end of 0 or
    less, or no range, is llama-server's default: from layer 1 to the last). Raises :class:`EngineError` when its
    width is not the model's."""
    n_layer = llama.llama_model_n_layer(ctx.model.handle)
    start, end = layer_range or (-1, -1)
    start = start if start > 0 else 1
    end = end if end > 0 else n_layer
    n_embd = ctx.model.info.n_embd
    if vector.n_embd != n_embd:  # llama.cpp only logs it: say it here, with both widths
        raise EngineError(f"control vector width {vector.n_embd} does not match the model's n_embd {n_embd}")
    data = np.ascontiguousarray(vector.data, dtype=np.float32)
    pointer = data.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    if llama.llama_set_adapter_cvec(ctx.handle, pointer, len(data), vector.n_embd, start, end) != 0:
        raise EngineError("llama.cpp could not set the control vector on the context (llama.cpp's log says why)")


def _load_one(path: str, scale: float) -> ControlVector:
    """One file's directions times ``scale``: ``common_control_vector_load_one``, with its checks as errors."""
    import gguf  # here: gguf costs megabytes a server without control vectors does not need

    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError) as exc:
        raise EngineError(f"failed to load control vector file from {path}: {exc}") from exc
    if not reader.tensors:
        raise EngineError(f"control vector {path}: no direction tensors found")
    strength = np.float32(scale)  # llama.cpp keeps the scale as a float
    n_embd = -1
    data = np.zeros(0, dtype=np.float32)
    for tensor in reader.tensors:
        layer = _layer_of(tensor.name)
        if layer is None or layer < 0:
            raise EngineError(f"control vector {path}: invalid/unparsable direction tensor layer index {tensor.name!r}")
        if layer == 0:
            raise EngineError(f"control vector {path}: invalid (zero) direction tensor layer index {tensor.name!r}")
        if tensor.tensor_type != gguf.GGMLQuantizationType.F32:
            raise EngineError(f"control vector {path}: invalid (non-F32) direction tensor type {tensor.name!r}")
        dims = [int(n) for n in tensor.shape]
        if any(n != 1 for n in dims[1:]):  # ggml_n_dims: trailing dimensions of 1 do not count
            raise EngineError(f"control vector {path}: invalid (non-1D) direction tensor shape {tensor.name!r}")
        if n_embd == -1:
            n_embd = int(tensor.n_elements)
        elif tensor.n_elements != n_embd:
            raise EngineError(
                f"control vector {path}: direction tensor {tensor.name!r} does not match previous dimensions"
            )
        if len(data) < n_embd * layer:  # extend if necessary; layer 0 is never stored
            data = np.concatenate([data, np.zeros(n_embd * layer - len(data), dtype=np.float32)])
        src = np.asarray(tensor.data, dtype=np.float32).reshape(-1)
        data[n_embd * (layer - 1) : n_embd * layer] += src * strength  # the same layer twice in a file adds up
    return ControlVector(n_embd, data)


def _layer_of(name: str) -> int | None:
    """N of ``direction.N`` (read as ``std::stoi`` reads it); None for any other name."""
    prefix, dot, rest = name.partition(".")
    if not dot or prefix != "direction":
        return None
    return leading_int(rest)
