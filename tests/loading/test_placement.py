"""Every device flag, from the command line to the ``llama_model_params`` and ``llama_context_params`` fields
llama-server's ``common_model_params_to_llama`` / ``common_context_params_to_llama`` set, for the model and for the
draft model; the checks against this build's devices, with llama-server's messages; the CPU build's one warning.
No GPU is needed: the fields are read back from the params structs."""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import llama_cpp.llama_cpp as llama
import pytest

from lfmserve.engine.records import Placement
from lfmserve.errors import EngineError
from lfmserve.llama.context import apply_kv
from lfmserve.llama.devices import cpu_buffer_type, gpu_offload, place, placed_devices, placed_overrides
from lfmserve.loading.engine_config import engine_config
from lfmserve.loading.placement import (
    FFN_DENSE,
    FFN_EXPERTS,
    check_placement,
    draft_placement,
    model_placement,
    projector_device,
    unused_on_cpu,
)
from lfmserve.settings import DeviceSettings, Settings

EXPERTS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
ZEROS = [0.0] * 16
cpu_only = pytest.mark.skipif(gpu_offload(), reason="this llama.cpp build has a device to offload to")


def _settings(argv: list[str]) -> Settings:
    return Settings.from_argv(argv, environ={})


@contextmanager
def _model_params(argv: list[str], *, draft: bool = False) -> Iterator[Any]:
    """The model's (or the draft model's) ``llama_model_params`` for ``argv``, with what it points to alive."""
    devices = _settings(argv).devices
    params = llama.llama_model_default_params()
    held = place(params, draft_placement(devices) if draft else model_placement(devices))
    yield params
    del held


def _fields(params: Any) -> dict[str, Any]:
    return {
        "n_gpu_layers": params.n_gpu_layers,
        "split_mode": params.split_mode,
        "main_gpu": params.main_gpu,
        "tensor_split": list(params.tensor_split[:16]),
        "devices": placed_devices(params),
        "overrides": placed_overrides(params),
        "no_host": params.no_host,
    }


DEFAULTS = {
    "n_gpu_layers": -1,
    "split_mode": llama.LLAMA_SPLIT_MODE_LAYER,
    "main_gpu": 0,
    "tensor_split": ZEROS,
    "devices": None,
    "overrides": [],
    "no_host": False,
}


@pytest.mark.parametrize(
    ("argv", "changed"),
    [
        ([], {}),
        (["-ngl", "0"], {"n_gpu_layers": 0}),
        (["--gpu-layers", "all"], {"n_gpu_layers": -2}),
        (["--n-gpu-layers", "auto"], {"n_gpu_layers": -1}),
        (["-ngl", "12"], {"n_gpu_layers": 12}),
        (["-sm", "none"], {"split_mode": llama.LLAMA_SPLIT_MODE_NONE}),
        (["-sm", "row"], {"split_mode": llama.LLAMA_SPLIT_MODE_ROW}),
        (["--split-mode", "tensor"], {"split_mode": llama.LLAMA_SPLIT_MODE_TENSOR}),
        (["-mg", "1"], {"main_gpu": 1}),
        (["-ts", "3,1"], {"tensor_split": [3.0, 1.0, *ZEROS[2:]]}),
        (["--tensor-split", "1/2/0.5"], {"tensor_split": [1.0, 2.0, 0.5, *ZEROS[3:]]}),
        (["-dev", "none"], {"devices": []}),
        (["--no-host"], {"no_host": True}),
        (["-ot", r"blk\.0\.=CPU"], {"overrides": [(r"blk\.0\.", "CPU")]}),
        (["--cpu-moe"], {"overrides": [(EXPERTS, "CPU")]}),
        (
            ["--n-cpu-moe", "2"],
            {"overrides": [(r"blk\.0\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"), (rf"blk\.1{EXPERTS}", "CPU")]},
        ),
        (["-ncffn", "1"], {"overrides": [(r"blk\.0\.ffn_(up|down|gate)\.", "CPU")]}),
        (
            ["--cpu-moe", "-ot", "a=CPU,b=CPU", "-ncffn", "1", "--override-tensor", "c=CPU", "-ncmoe", "1"],
            {
                "overrides": [
                    ("a", "CPU"),
                    ("b", "CPU"),
                    ("c", "CPU"),
                    (EXPERTS, "CPU"),
                    (rf"blk\.0{EXPERTS}", "CPU"),
                    (r"blk\.0\.ffn_(up|down|gate)\.", "CPU"),
                ]
            },
        ),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_each_flag_sets_its_model_params_field(argv: list[str], changed: dict[str, Any]) -> None:
    with _model_params(argv) as params:
        assert _fields(params) == {**DEFAULTS, **changed}


def test_the_cpu_shortcuts_and_ot_cpu_name_llama_cpps_own_cpu_buffer_type() -> None:
    """llama.cpp compares the override's pointer with its ``ggml_backend_cpu_buffer_type()`` (to keep repacking on
    for it): the pointer written must be that one, from the ggml libllama uses."""
    with _model_params(["-ot", "x=CPU", "--cpu-moe"]) as params:
        array = ctypes.cast(params.tensor_buft_overrides, ctypes.POINTER(ctypes.c_void_p * 2))
        first, second, end = (array[i] for i in range(3))
        assert (first[1], second[1], end[0], end[1]) == (cpu_buffer_type(), cpu_buffer_type(), None, None)
    assert (FFN_EXPERTS, FFN_DENSE) == (EXPERTS, r"\.ffn_(up|down|gate)\.")


def test_kv_and_op_offload_set_the_context_params() -> None:
    for argv, expected in [
        ([], (True, True)),
        (["-nkvo"], (False, True)),
        (["--no-op-offload"], (True, False)),
        (["--no-kv-offload", "--no-op-offload"], (False, False)),
        (["-nkvo", "-kvo", "--no-op-offload", "--op-offload"], (True, True)),
    ]:
        config = engine_config(_settings(argv))
        params = llama.llama_context_default_params()
        params.offload_kqv = params.op_offload = not expected[0]  # so that each field is seen to be written
        apply_kv(params, config.kv)
        assert (params.offload_kqv, params.op_offload) == expected, argv


def test_the_draft_model_takes_its_own_layers_overrides_and_devices_and_the_rest_of_the_targets() -> None:
    argv = [
        *(
            "-ngl",
            "5",
            "-ot",
            "y=CPU",
            "--cpu-moe",
            "-sm",
            "row",
            "-mg",
            "1",
            "-ts",
            "1,1",
            "--no-host",
            "-dev",
            "none",
        ),
        *("-ngld", "3", "-otd", "x=CPU", "-cmoed", "-ncmoed", "1"),
    ]
    with _model_params(argv, draft=True) as params:
        assert _fields(params) == {
            "n_gpu_layers": 3,
            "split_mode": llama.LLAMA_SPLIT_MODE_ROW,
            "main_gpu": 1,
            "tensor_split": [1.0, 1.0, *ZEROS[2:]],
            "devices": [],
            "overrides": [("x", "CPU"), (EXPERTS, "CPU"), (rf"blk\.0{EXPERTS}", "CPU")],
            "no_host": True,
        }
    with _model_params(["-ngl", "0", "-ot", "y=CPU"], draft=True) as params:
        assert _fields(params) == DEFAULTS  # -ngld's default is auto, and the target's overrides stay its own
    assert engine_config(_settings(argv)).draft_placement == draft_placement(_settings(argv).devices)


def test_a_draft_on_one_device_of_its_own_splits_by_layer() -> None:
    assert draft_placement(DeviceSettings(split_mode="row", spec_draft_device=("CUDA1",))) == Placement(
        split_mode="layer", devices=("CUDA1",)
    )
    assert draft_placement(DeviceSettings(split_mode="row", spec_draft_device=("CUDA0", "CUDA1"))).split_mode == "row"
    assert draft_placement(DeviceSettings(split_mode="row", devices=("CUDA0",))) == Placement(
        split_mode="row", devices=("CUDA0",)
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], (True, None)),
        (["-ngl", "0"], (False, None)),
        (["--no-mmproj-offload"], (False, None)),
        (["-mmdev", "none"], (False, None)),
        (["-mmdev", "CUDA1", "--no-mmproj-offload", "-ngl", "0"], (True, "CUDA1")),
    ],
)
def test_the_projectors_device(argv: list[str], expected: tuple[bool, str | None]) -> None:
    assert projector_device(_settings(argv)) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-dev", "CUDA0"], "-dev: invalid device: CUDA0"),
        (["-dev", "none,CPU"], "-dev: invalid device: none"),
        (["--device", "cpu"], "-dev: invalid device: cpu"),
        (["-ot", "x=CUDA0"], '-ot: unknown buffer type "CUDA0" (available buffer types: CPU)'),
        (["-ot", "x=cpu"], '-ot: unknown buffer type "cpu" (available buffer types: CPU)'),
        (["-ot", r"blk\.0\."], r"-ot blk\.0\.: invalid value (expected <tensor name pattern>=<buffer type>)"),
        (["-md", "d.gguf", "-devd", "CUDA1"], "-devd: invalid device: CUDA1"),
        (["-md", "d.gguf", "-otd", "x=GPU"], '-otd: unknown buffer type "GPU" (available buffer types: CPU)'),
        (["-mmdev", "CUDA0"], "-mmdev: invalid device: CUDA0"),
    ],
)
@cpu_only
def test_a_device_or_buffer_type_this_build_lacks_stops_the_start(argv: list[str], message: str) -> None:
    with pytest.raises(EngineError) as error:
        check_placement(_settings(argv))
    assert str(error.value) == message


@cpu_only
def test_a_cpu_build_names_the_device_flags_given_in_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    argv = "-sm none -mg 0 -ts 1,1 -ot exps=CPU --cpu-moe -dev none -nkvo -ngl 99 -mmdev none -ngld 2 -cmoed"
    with caplog.at_level(logging.WARNING, logger="lfmserve.loading.placement"):
        check_placement(_settings(argv.split()))
        check_placement(_settings(["-ngl", "auto", "-mg", "0", "--op-offload", "-kvo"]))  # llama-server's defaults
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "lfmserve.loading.placement"] == [
        (
            "WARNING",
            "llama-server options ignored: -ngl, -dev, -sm, -ts, -ot, -cmoe, -nkvo, -mmdev, -ngld, -cmoed "
            "(device placement: this llama.cpp build runs on the CPU)",
        )
    ]


def test_every_device_field_but_the_listing_and_fit_is_named_when_given() -> None:
    given = DeviceSettings(
        n_gpu_layers=0,
        devices=(),
        split_mode="none",
        tensor_split=(1.0,),
        main_gpu=1,
        override_tensor=("a=CPU",),
        cpu_moe=True,
        n_cpu_moe=1,
        n_cpu_ffn=1,
        no_host=True,
        kv_offload=False,
        op_offload=False,
        mmproj_device="none",
        spec_draft_n_gpu_layers=0,
        spec_draft_device=(),
        spec_draft_override_tensor=("b=CPU",),
        spec_draft_cpu_moe=True,
        spec_draft_n_cpu_moe=1,
        list_devices=True,
    )
    assert unused_on_cpu(given) == [
        *("-ngl", "-dev", "-sm", "-ts", "-mg", "-ot", "-cmoe", "-ncmoe", "-ncffn", "--no-host", "-nkvo"),
        *("--no-op-offload", "-mmdev", "-ngld", "-devd", "-otd", "-cmoed", "-ncmoed"),
    ]
    assert unused_on_cpu(DeviceSettings(list_devices=True)) == []
