"""llama-server's load and context flags: ``--override-kv``, ``--check-tensors``, ``--control-vector*``, ``--rope-*``
and ``--yarn-*``, read into the settings (and their ``LLAMA_ARG_*`` variables) and handed to the engine's context
options."""

from __future__ import annotations

import pytest

from lfmserve.engine.records import RopeOptions
from lfmserve.errors import EngineError
from lfmserve.loading.engine_config import engine_config
from lfmserve.settings import Settings
from lfmserve.settings.argv import preset_argv


def test_the_flags_are_read_and_written_back() -> None:
    argv = ["--override-kv", "a=int:1,b=str:x", "--override-kv", "c=bool:true", "--check-tensors"]
    argv += ["--rope-scaling", "yarn", "--rope-freq-base", "20000", "--yarn-orig-ctx", "4096", "--yarn-beta-fast", "8"]
    settings = Settings.from_argv(argv, environ={})
    weights = settings.weights
    assert (weights.override_kv, weights.check_tensors) == (("a=int:1,b=str:x", "c=bool:true"), True)
    assert Settings.from_argv(settings.to_argv(), environ={}) == settings
    assert engine_config(settings).rope == RopeOptions(
        scaling="yarn", freq_base=20000.0, yarn_orig_ctx=4096, yarn_beta_fast=8.0
    )


@pytest.mark.parametrize(
    ("argv", "freq_scale"),
    [
        ([], 0.0),
        (["--rope-freq-scale", "0.5"], 0.5),
        (["--rope-scale", "4"], 0.25),
        (["--rope-scale", "4", "--rope-freq-scale", "0.5"], 0.25),
    ],
)
def test_rope_scale_is_the_inverse_frequency_scale(argv: list[str], freq_scale: float) -> None:
    assert engine_config(Settings.from_argv(argv, environ={})).rope.freq_scale == freq_scale


def test_llama_servers_variables_set_them() -> None:
    environ = {
        "LLAMA_ARG_ROPE_SCALING_TYPE": "linear",
        "LLAMA_ARG_ROPE_SCALE": "2",
        "LLAMA_ARG_YARN_EXT_FACTOR": "0.5",
        "LLAMA_ARG_YARN_ATTN_FACTOR": "1.5",
        "LLAMA_ARG_YARN_BETA_SLOW": "2",
    }
    rope = engine_config(Settings.from_argv([], environ=environ)).rope
    assert rope == RopeOptions(
        scaling="linear", freq_scale=0.5, yarn_ext_factor=0.5, yarn_attn_factor=1.5, yarn_beta_slow=2.0
    )


def test_the_control_vector_flags_are_read_as_llama_server_reads_them_and_written_back() -> None:
    argv = ["--control-vector", "a.gguf,b.gguf", "--control-vector", "c.gguf"]
    argv += ["--control-vector-scaled", "d.gguf:0.5,e.gguf:-2", "--control-vector-scaled", "f.gguf:.25x"]
    argv += ["--control-vector-layer-range", "3", "10"]
    settings = Settings.from_argv(argv, environ={})
    engine = settings.engine
    assert engine.control_vector == ("a.gguf,b.gguf", "c.gguf")
    assert engine.control_vector_scaled == ("d.gguf:0.5,e.gguf:-2", "f.gguf:.25x")
    assert engine.control_vector_layer_range == (3, 10)
    assert Settings.from_argv(settings.to_argv(), environ={}) == settings
    assert settings.to_argv()[-3:] == ["--control-vector-layer-range", "3", "10"]
    config = engine_config(settings)
    assert config.control_vectors == (
        ("a.gguf", 1.0),
        ("b.gguf", 1.0),
        ("c.gguf", 1.0),
        ("d.gguf", 0.5),
        ("e.gguf", -2.0),
        ("f.gguf", 0.25),  # std::stof reads the leading number
    )
    assert config.control_vector_layers == (3, 10)
    default = engine_config(Settings.from_argv([], environ={}))
    assert (default.control_vectors, default.control_vector_layers) == ((), None)
    from_variable = Settings.from_argv([], environ={"LFMSERVE_CONTROL_VECTOR_LAYER_RANGE": "3 10"})
    assert from_variable.engine.control_vector_layer_range == (3, 10)
    from_preset = Settings.from_argv(preset_argv({"control-vector-layer-range": "3 10"}), environ={})
    assert from_preset.engine.control_vector_layer_range == (3, 10)


@pytest.mark.parametrize("entry", ["d.gguf", "d.gguf:", "d.gguf:x", "c:/d.gguf:0.5"])
def test_a_control_vector_scaled_entry_of_another_form_stops_the_start(entry: str) -> None:
    settings = Settings.from_argv(["--control-vector-scaled", entry], environ={})
    with pytest.raises(EngineError, match="--control-vector-scaled .*: expected FNAME:SCALE"):
        engine_config(settings)


def test_the_layer_range_takes_two_whole_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        Settings.from_argv(["--control-vector-layer-range", "3"], environ={})
    assert "--control-vector-layer-range: expected 2 arguments" in capsys.readouterr().err
