"""``--control-vector``: the files are read and summed as llama.cpp's ``common_control_vector_load`` does, a file
llama-server would not start with is an EngineError naming it, and the vector reaches the context's layers."""

from __future__ import annotations

from pathlib import Path

import gguf
import llama_cpp.llama_cpp as llama
import numpy as np
import pytest

from lfmserve.errors import EngineError
from lfmserve.llama.context import NativeContext
from lfmserve.llama.control_vectors import ControlVector, apply_control_vector, load_control_vectors
from lfmserve.llama.model import NativeModel


def write_control_vector(path: Path, tensors: dict[str, np.ndarray]) -> str:
    """A control vector GGUF as llama.cpp's cvector-generator writes one: a ``direction.N`` tensor per layer."""
    writer = gguf.GGUFWriter(str(path), "controlvector")
    for name, data in tensors.items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def _f32(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def test_the_files_are_scaled_summed_and_placed_from_layer_1(tmp_path: Path) -> None:
    a1, a3, b1, b2 = (_f32(seed, 4) for seed in range(4))
    first = write_control_vector(tmp_path / "a.gguf", {"direction.1": a1, "direction.3": a3})
    second = write_control_vector(tmp_path / "b.gguf", {"direction.2": b2, "direction.1": b1})
    vector = load_control_vectors([(first, 0.5), (second, 2.0)])
    half, two = np.float32(0.5), np.float32(2.0)
    expected = np.concatenate([a1 * half + b1 * two, b2 * two, a3 * half])  # layer 1 first, no layer 0
    assert (vector.n_embd, vector.n_layers, vector.data.dtype) == (4, 3, np.float32)
    assert np.array_equal(vector.data, expected)
    shorter = load_control_vectors([(second, 1.0), (first, 1.0)])  # extended by the longer file that follows
    assert np.array_equal(shorter.data, np.concatenate([b1 + a1, b2, a3]))


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({}, "no direction tensors found"),
        ({"direction.0": _f32(0, 4)}, "invalid (zero) direction tensor layer index"),
        ({"direction.x": _f32(0, 4)}, "invalid/unparsable direction tensor layer index"),
        ({"output.1": _f32(0, 4)}, "invalid/unparsable direction tensor layer index"),
        ({"direction.1": _f32(0, 4).astype(np.float16)}, "invalid (non-F32) direction tensor type"),
        ({"direction.1": _f32(0, 8).reshape(2, 4)}, "invalid (non-1D) direction tensor shape"),
        ({"direction.1": _f32(0, 4), "direction.2": _f32(0, 5)}, "does not match previous dimensions"),
    ],
)
def test_a_file_llama_server_would_skip_stops_the_load(
    tmp_path: Path, tensors: dict[str, np.ndarray], message: str
) -> None:
    path = write_control_vector(tmp_path / "bad.gguf", tensors)
    with pytest.raises(EngineError, match="bad.gguf") as error:
        load_control_vectors([(path, 1.0)])
    assert message in str(error.value)


def test_files_of_different_widths_or_a_missing_file_stop_the_load(tmp_path: Path) -> None:
    four = write_control_vector(tmp_path / "four.gguf", {"direction.1": _f32(0, 4)})
    five = write_control_vector(tmp_path / "five.gguf", {"direction.1": _f32(0, 5)})
    with pytest.raises(EngineError, match=r"five.gguf: its width 5 does not match the previous files' 4"):
        load_control_vectors([(four, 1.0), (five, 1.0)])
    with pytest.raises(EngineError, match="failed to load control vector file from .*missing.gguf"):
        load_control_vectors([(str(tmp_path / "missing.gguf"), 1.0)])


def _last_logits(model: NativeModel, vector: ControlVector | None, layers: tuple[int, int] | None) -> np.ndarray:
    ctx = NativeContext(model, n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1, n_threads=1, n_threads_batch=1)
    try:
        if vector is not None:
            apply_control_vector(ctx, vector, layers)
        index = ctx.batch.add(list(range(10, 40)), 0, 0, True)
        ctx.decode()
        return ctx.logits(index).copy()
    finally:
        ctx.close()


def test_a_vector_changes_the_logits_only_where_it_applies(tiny_gguf: Path, tmp_path: Path) -> None:
    model = NativeModel(tiny_gguf)
    try:
        n_embd, n_layer = model.info.n_embd, llama.llama_model_n_layer(model.handle)
        # llama.cpp adds a vector after layers 1 to n_layer - 1: the model's last layer is the one that takes it.
        last = write_control_vector(tmp_path / "last.gguf", {f"direction.{n_layer - 1}": _f32(7, n_embd) * 4})
        beyond = write_control_vector(tmp_path / "beyond.gguf", {f"direction.{n_layer}": _f32(7, n_embd) * 4})
        plain = _last_logits(model, None, None)
        steered = _last_logits(model, load_control_vectors([(last, 1.0)]), None)
        assert not np.allclose(steered, plain, atol=1e-4)
        assert np.array_equal(_last_logits(model, load_control_vectors([(last, 0.0)]), None), plain)
        assert np.array_equal(_last_logits(model, load_control_vectors([(beyond, 1.0)]), None), plain)
        outside = (n_layer, n_layer)  # a range without the vector's layer
        assert np.array_equal(_last_logits(model, load_control_vectors([(last, 1.0)]), outside), plain)
        assert np.array_equal(_last_logits(model, load_control_vectors([(last, 1.0)]), (0, 0)), steered)
        narrow = write_control_vector(tmp_path / "narrow.gguf", {"direction.1": _f32(7, n_embd + 1)})
        with pytest.raises(EngineError, match=rf"width {n_embd + 1} does not match the model's n_embd {n_embd}"):
            _last_logits(model, load_control_vectors([(narrow, 1.0)]), None)
    finally:
        model.close()
