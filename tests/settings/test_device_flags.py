"""llama-server's device flags read into :class:`~lfmserve.settings.DeviceSettings`: each spelling, its value's form
(``-ngl auto|all|N``, ``-dev a,b|none``, ``-ts 3,1``, ``-ot`` repeated), its variable, and back to flags."""

from __future__ import annotations

import pytest

from lfmserve.settings import DeviceSettings, Settings


def _devices(argv: list[str], environ: dict[str, str] | None = None) -> DeviceSettings:
    return Settings.from_argv(argv, environ=environ or {}).devices


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        Settings.from_argv(argv, environ={})
    assert exit_info.value.code == 1
    return capsys.readouterr().err


def test_the_defaults_are_llama_servers() -> None:
    assert DeviceSettings() == _devices([])
    defaults = DeviceSettings()
    assert (defaults.n_gpu_layers, defaults.devices, defaults.split_mode, defaults.tensor_split) == (
        -1,
        None,
        "layer",
        (),
    )
    assert (defaults.main_gpu, defaults.override_tensor, defaults.cpu_moe, defaults.n_cpu_moe, defaults.n_cpu_ffn) == (
        0,
        (),
        False,
        0,
        0,
    )
    assert (defaults.no_host, defaults.kv_offload, defaults.op_offload, defaults.mmproj_device) == (
        False,
        True,
        True,
        None,
    )
    assert (defaults.spec_draft_n_gpu_layers, defaults.spec_draft_device, defaults.spec_draft_override_tensor) == (
        -1,
        None,
        (),
    )
    assert (defaults.spec_draft_cpu_moe, defaults.spec_draft_n_cpu_moe, defaults.list_devices) == (False, 0, False)


@pytest.mark.parametrize(
    ("value", "layers"), [("auto", -1), ("all", -2), ("0", 0), ("99", 99), ("-1", -1)], ids=lambda v: str(v)
)
def test_gpu_layers_take_a_number_auto_or_all(value: str, layers: int) -> None:
    for name in ("-ngl", "--gpu-layers", "--n-gpu-layers"):
        assert _devices([name, value]).n_gpu_layers == layers
    for name in ("--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"):
        assert _devices([name, value]).spec_draft_n_gpu_layers == layers
    assert _devices([], {"LLAMA_ARG_N_GPU_LAYERS": value}).n_gpu_layers == layers
    assert _devices([], {"LLAMA_ARG_N_GPU_LAYERS_DRAFT": value}).spec_draft_n_gpu_layers == layers


def test_devices_are_a_comma_list_or_none() -> None:
    assert _devices(["-dev", "CUDA0,CUDA1"]).devices == ("CUDA0", "CUDA1")
    assert _devices(["--device", "none"]).devices == ()
    assert _devices([], {"LLAMA_ARG_DEVICE": "Vulkan0"}).devices == ("Vulkan0",)
    assert _devices(["-devd", "none"]).spec_draft_device == ()
    assert _devices(["--spec-draft-device", "CUDA1"]).spec_draft_device == ("CUDA1",)
    assert _devices(["--device-draft", "CUDA0,CUDA1"]).spec_draft_device == ("CUDA0", "CUDA1")


def test_split_mode_main_gpu_and_tensor_split() -> None:
    assert [_devices(["-sm", mode]).split_mode for mode in ("none", "layer", "row", "tensor")] == [
        "none",
        "layer",
        "row",
        "tensor",
    ]
    assert _devices(["--split-mode", "row", "--main-gpu", "1"]) == DeviceSettings(split_mode="row", main_gpu=1)
    assert _devices(["-ts", "3,1"]).tensor_split == (3.0, 1.0)
    assert _devices(["--tensor-split", "3/1,0.5"]).tensor_split == (3.0, 1.0, 0.5)
    assert _devices([], {"LLAMA_ARG_TENSOR_SPLIT": "1,2"}).tensor_split == (1.0, 2.0)
    assert _devices([], {"LLAMA_ARG_SPLIT_MODE": "none", "LLAMA_ARG_MAIN_GPU": "2"}) == DeviceSettings(
        split_mode="none", main_gpu=2
    )


def test_overrides_are_kept_as_given_in_flag_order() -> None:
    given = _devices(["-ot", r"blk\.0\.=CPU,exps=CPU", "--override-tensor", "x=CPU", "-otd", "y=CPU"])
    assert (given.override_tensor, given.spec_draft_override_tensor) == (
        (r"blk\.0\.=CPU,exps=CPU", "x=CPU"),
        ("y=CPU",),
    )
    assert _devices([], {"LLAMA_ARG_OVERRIDE_TENSOR": "a=CPU"}).override_tensor == ("a=CPU",)


def test_expert_and_ffn_shortcuts() -> None:
    assert _devices(["-cmoe", "-ncmoe", "2", "-ncffn", "3"]) == DeviceSettings(cpu_moe=True, n_cpu_moe=2, n_cpu_ffn=3)
    assert _devices(["--cpu-moe", "--n-cpu-moe", "1", "--n-cpu-ffn", "0"]) == DeviceSettings(cpu_moe=True, n_cpu_moe=1)
    assert _devices([], {"LLAMA_ARG_CPU_MOE": "1", "LLAMA_ARG_N_CPU_MOE": "4", "LLAMA_ARG_N_CPU_FFN": "5"}) == (
        DeviceSettings(cpu_moe=True, n_cpu_moe=4, n_cpu_ffn=5)
    )
    draft = _devices(["-cmoed", "--spec-draft-ncmoe", "2"])
    assert draft == DeviceSettings(spec_draft_cpu_moe=True, spec_draft_n_cpu_moe=2)
    for name in ("--spec-draft-n-cpu-moe", "-ncmoed", "--n-cpu-moe-draft"):
        assert _devices([name, "3"]).spec_draft_n_cpu_moe == 3
    assert _devices([], {"LLAMA_ARG_SPEC_DRAFT_CPU_MOE": "true", "LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE": "1"}) == (
        DeviceSettings(spec_draft_cpu_moe=True, spec_draft_n_cpu_moe=1)
    )


def test_offload_switches_and_the_projectors_device() -> None:
    assert _devices(["-nkvo", "--no-op-offload", "--no-host"]) == DeviceSettings(
        kv_offload=False, op_offload=False, no_host=True
    )
    assert _devices(["--no-kv-offload", "-kvo", "--no-op-offload", "--op-offload"]) == DeviceSettings()
    assert _devices([], {"LLAMA_ARG_NO_KV_OFFLOAD": "", "LLAMA_ARG_NO_HOST": "1"}) == DeviceSettings(
        kv_offload=False, no_host=True
    )
    assert _devices(["-mmdev", "none"]).mmproj_device == "none"
    assert _devices(["--mmproj-device", "CUDA1"]).mmproj_device == "CUDA1"
    assert _devices([], {"MTMD_BACKEND_DEVICE": "Vulkan0"}).mmproj_device == "Vulkan0"
    assert _devices(["--list-devices"]).list_devices is True


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-ngl", "many"], "argument -ngl/--gpu-layers/--n-gpu-layers: invalid gpu_layers value: 'many'"),
        (
            ["-sm", "rows"],
            "argument -sm/--split-mode: invalid choice: 'rows' (choose from 'none', 'layer', 'row', 'tensor')",
        ),
        (["-ts", "3,x"], "argument -ts/--tensor-split: invalid tensor_split value: '3,x'"),
        (
            ["-ts", ",".join(["1"] * 16)],
            "argument -ts/--tensor-split: got 16 input configs, but system only has 16 devices",
        ),
        (["-ncmoe", "-1"], "argument -ncmoe/--n-cpu-moe: invalid parse_count value: '-1'"),
        (["-ncffn", "x"], "argument -ncffn/--n-cpu-ffn: invalid parse_count value: 'x'"),
        (["-mmdev", "CUDA0,CUDA1"], "argument -mmdev/--mmproj-device: only one device may be specified for mmproj"),
    ],
)
def test_a_malformed_value_exits_1_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _error(argv, capsys) == f"lfmserve: error: {message} (see --help)\n"


def test_no_device_flag_is_ignored_by_the_parser_any_more() -> None:
    argv = "-sm none -mg 0 -ts 1,1 -ot exps=CPU --cpu-moe -dev none -nkvo --no-op-offload --no-host -mmdev none"
    assert Settings.from_argv([*argv.split(), "-ngld", "0", "-devd", "none", "-otd", "x=CPU", "-cmoed"]).ignored == ()


def test_to_argv_reproduces_every_device_field() -> None:
    argv = [
        *("-ngl", "all", "-dev", "none", "-sm", "row", "-ts", "3,1", "-mg", "1", "-ot", "a=CPU", "-ot", "b=CPU"),
        *("-cmoe", "-ncmoe", "2", "-ncffn", "1", "--no-host", "-nkvo", "--no-op-offload", "-mmdev", "none"),
        *("-ngld", "0", "-devd", "CUDA1", "-otd", "x=CPU", "-cmoed", "-ncmoed", "3"),
    ]
    settings = Settings.from_argv(argv, environ={})
    assert settings.to_argv() == [
        *("--n-gpu-layers", "all", "--device", "none", "--split-mode", "row", "--tensor-split", "3.0,1.0"),
        *("--main-gpu", "1", "--override-tensor", "a=CPU", "--override-tensor", "b=CPU", "--cpu-moe"),
        *("--n-cpu-moe", "2", "--n-cpu-ffn", "1", "--no-host", "--no-kv-offload", "--no-op-offload"),
        *("--mmproj-device", "none", "--n-gpu-layers-draft", "0", "--spec-draft-device", "CUDA1"),
        *("--spec-draft-override-tensor", "x=CPU", "--spec-draft-cpu-moe", "--spec-draft-n-cpu-moe", "3"),
    ]
    assert Settings.from_argv(settings.to_argv(), environ={}) == settings
    assert Settings.from_argv(["-ngl", "-2"], environ={}).to_argv() == ["--n-gpu-layers", "all"]
    assert Settings.from_argv(["-dev", "CUDA0,CUDA1"], environ={}).to_argv() == ["--device", "CUDA0,CUDA1"]
