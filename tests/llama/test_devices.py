"""llama.cpp's devices through ggml's own functions (declared with ctypes), ``--list-devices``' text, and a placement
that llama.cpp loads with: the tensors it overrode are exactly those the patterns name."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import gguf
import llama_cpp.llama_cpp as llama
import pytest

from lfmserve.engine.records import KvCacheOptions, Placement
from lfmserve.errors import EngineError
from lfmserve.llama.context import NativeContext
from lfmserve.llama.devices import (
    Device,
    buffer_types,
    cpu_buffer_type,
    device_handle,
    device_list,
    devices,
    gpu_offload,
    place,
    placed_devices,
    placed_overrides,
)
from lfmserve.llama.model import NativeModel
from lfmserve.loading.placement import model_placement
from lfmserve.settings import Settings
from lfmserve.testing import TinyLfm2, write_lfm2_gguf

cpu_only = pytest.mark.skipif(gpu_offload(), reason="this llama.cpp build has a device to offload to")


def test_the_cpu_is_a_registered_device_with_its_memory() -> None:
    cpu = [device for device in devices() if device.type == "CPU"]
    assert [device.name for device in cpu] == ["CPU"]
    assert 0 < cpu[0].free_bytes <= cpu[0].total_bytes and cpu[0].description
    assert buffer_types()["CPU"] == cpu_buffer_type() != 0


def test_a_devices_line_is_llama_servers() -> None:
    device = Device("CUDA0", "NVIDIA H100 80GB HBM3", "GPU", 81559 * 2**20 + 5, 80995 * 2**20 + 2**20 - 1)
    assert device.line == "  CUDA0: NVIDIA H100 80GB HBM3 (81559 MiB, 80995 MiB free)"


@cpu_only
def test_the_device_list_is_llama_servers_then_the_cpus() -> None:
    (cpu,) = devices()
    assert device_list() == (
        "Available devices:\n  (none)\nCPU devices (always used; -dev takes the devices above):\n" + cpu.line
    )
    assert re.fullmatch(r"  CPU: .+ \(\d+ MiB, \d+ MiB free\)", cpu.line)


def test_devices_are_found_by_name_but_not_the_cpu() -> None:
    with pytest.raises(EngineError, match="^-dev: invalid device: CPU$"):
        device_handle("CPU")
    with pytest.raises(EngineError, match="^-devd: invalid device: NoSuchGPU0$"):
        device_handle("NoSuchGPU0", "-devd")


def test_unplaced_params_list_no_devices_and_no_overrides() -> None:
    params = llama.llama_model_default_params()
    assert (placed_devices(params), placed_overrides(params)) == (None, [])
    held = place(params, Placement(devices=(), overrides=(("a", "CPU"), ("b", "CPU"))))
    assert (placed_devices(params), placed_overrides(params)) == ([], [("a", "CPU"), ("b", "CPU")])
    assert [pattern for pattern in held.patterns] == [b"a", b"b"]


def test_a_bad_override_leaves_the_load_unstarted() -> None:
    params = llama.llama_model_default_params()
    with pytest.raises(EngineError, match=r'^-otd: unknown buffer type "ROCm0" \(available buffer types: CPU'):
        place(params, Placement(overrides=(("a", "CPU"), ("b", "ROCm0"))), override_flag="-otd")


@pytest.fixture(scope="module")
def moe_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny LFM2 mixture of experts: layer 0 dense, layers 1 to 3 with experts."""
    return write_lfm2_gguf(tmp_path_factory.mktemp("moe") / "tiny-moe.gguf", TinyLfm2(seed=3, n_expert=4))


def test_llama_cpp_loads_with_the_overrides_and_places_exactly_the_tensors_they_name(
    moe_gguf: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings.from_argv(
        ["-ot", r"blk\.0\.=CPU", "--cpu-moe", "-ngl", "0", "-nkvo", "--no-op-offload"], environ={}
    )
    with caplog.at_level(logging.DEBUG, logger="lfmserve.llama_cpp"):
        model = NativeModel(moe_gguf, placement=model_placement(settings.devices))
    try:
        overridden = {
            match[1]
            for record in caplog.records
            if (match := re.match(r"tensor (\S+) \(.*\) buffer type overridden to CPU$", record.getMessage()))
        }
        names = [tensor.name for tensor in gguf.GGUFReader(moe_gguf).tensors]
        expected = {name for name in names if name.startswith("blk.0.") or re.search(r"\.ffn_\w+_exps", name)}
        assert overridden == expected
        assert {name for name in expected if "exps" in name} == {
            f"blk.{layer}.ffn_{kind}_exps.weight" for layer in (1, 2, 3) for kind in ("gate", "up", "down")
        }
        kv = KvCacheOptions(offload_kqv=False, op_offload=False)
        ctx = NativeContext(model, n_ctx=256, n_batch=8, n_ubatch=8, n_seq_max=1, n_threads=1, n_threads_batch=1, kv=kv)
        try:
            ctx.batch.add([1, 6], 0, 0, True)
            ctx.decode()  # the offload flags are taken by llama.cpp's context as well
        finally:
            ctx.close()
    finally:
        model.close()
