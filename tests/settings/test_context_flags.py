"""llama-server's load and context flags: ``--override-kv``, ``--check-tensors``, ``--rope-*`` and ``--yarn-*``, read
into the settings (and their ``LLAMA_ARG_*`` variables) and handed to the engine's context options."""

from __future__ import annotations

import pytest

from lfmserve.engine.records import RopeOptions
from lfmserve.loading.engine_config import engine_config
from lfmserve.settings import Settings


def test_the_flags_are_read_and_written_back() -> None:
    argv = ["--override-kv", "a=int:1,b=str:x", "--override-kv", "c=bool:true", "--check-tensors"]
    argv += ["--rope-scaling", "yarn", "--rope-freq-base", "20000", "--yarn-orig-ctx", "4096", "--yarn-beta-fast", "8"]
    settings = Settings.from_argv(argv, environ={})
    engine = settings.engine
    assert (engine.override_kv, engine.check_tensors) == (("a=int:1,b=str:x", "c=bool:true"), True)
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
