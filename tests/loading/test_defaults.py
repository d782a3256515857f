import pytest

from lfmserve.loading.defaults import gguf_sampling, match_family, model_identity, resolve_defaults


@pytest.mark.parametrize(
    ("names", "family"),
    [
        (("LFM2.5 1.2B Instruct", "LFM2.5", "1.2B"), "LFM2.5-1.2B-Instruct"),
        (("LFM2.5-1.2B-Instruct-Q4_K_M",), "LFM2.5-1.2B-Instruct"),
        (("LFM2.5 1.2B Thinking",), "LFM2.5-1.2B-Thinking"),
        (("LFM2.5 8B A1B",), "LFM2.5-8B-A1B"),
        (("LFM2 24B A2B",), "LFM2-24B-A2B"),
        (("LFM2 1.2B",), "LFM2 text, LFM2.5-JP"),
        (("LFM2.5 1.2B JP",), "LFM2 text, LFM2.5-JP"),
        (("LFM2.5 VL 1.6B",), "LFM2-VL, LFM2.5-VL"),
        (("LFM2-VL-450M",), "LFM2-VL, LFM2.5-VL"),
    ],
)
def test_family_matching(names: tuple[str, ...], family: str) -> None:
    matched = match_family(model_identity(*names))
    assert matched is not None and matched[0] == family


def test_other_models_fall_back_to_llama_server_defaults() -> None:
    """llama-server's numbers (common/common.h at the pinned commit), written out, not read from the code."""
    assert match_family(model_identity("gemma-3-270m")) is None
    resolved = resolve_defaults(cli={}, gguf_sampling={}, identity="gemma-3-270m")
    assert resolved.params.to_json() == {
        "temperature": 0.8,
        "top_k": 40,
        "top_p": 0.95,
        "min_p": 0.05,
        "typical_p": 1.0,
        "repeat_penalty": 1.0,
        "repeat_last_n": 64,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "dynatemp_range": 0.0,
        "dynatemp_exponent": 1.0,
        "top_n_sigma": -1.0,
        "xtc_probability": 0.0,
        "xtc_threshold": 0.1,
        "dry_multiplier": 0.0,
        "dry_base": 1.75,
        "dry_allowed_length": 2,
        "dry_penalty_last_n": 64,
        "dry_sequence_breakers": ["\n", ":", '"', "*"],
        "mirostat": 0,
        "mirostat_tau": 5.0,
        "mirostat_eta": 0.1,
        "adaptive_target": -1.0,
        "adaptive_decay": 0.9,
        "min_keep": 0,
        "samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"],
        "seed": 4294967295,
        "logit_bias": [],
        "ignore_eos": False,
    }
    assert resolved.sources == {
        name: "llama-server default"
        for name in (
            "temperature",
            "top_k",
            "top_p",
            "min_p",
            "typical_p",
            "repeat_penalty",
            "repeat_last_n",
            "presence_penalty",
            "frequency_penalty",
            "dynatemp_range",
            "dynatemp_exponent",
            "top_n_sigma",
            "xtc_probability",
            "xtc_threshold",
            "dry_multiplier",
            "dry_base",
            "dry_allowed_length",
            "dry_penalty_last_n",
            "dry_sequence_breakers",
            "mirostat",
            "mirostat_tau",
            "mirostat_eta",
            "adaptive_target",
            "adaptive_decay",
            "min_keep",
            "samplers",
            "seed",
        )
    }
    assert resolved.family is None


def test_layers_cli_over_gguf_over_family_over_llama_server() -> None:
    resolved = resolve_defaults(
        cli={"top_k": 7},
        gguf_sampling={"temperature": 0.6, "top_k": 3},
        identity=model_identity("LFM2.5 1.2B Instruct"),
    )
    p = resolved.params
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.repeat_last_n) == (0.6, 7, 1.0, 0.0, 1.05, 64)
    assert resolved.sources["top_k"] == "command line"
    assert resolved.sources["temperature"] == "GGUF general.sampling"
    assert resolved.sources["repeat_penalty"] == "LFM family table (LFM2.5-1.2B-Instruct)"
    assert resolved.sources["repeat_last_n"] == "llama-server default"


def test_the_gguf_sets_llama_cpps_keys_and_the_sampler_order() -> None:
    meta = {
        "general.sampling.temp": "0.25",
        "general.sampling.penalty_last_n": "32",
        "general.sampling.xtc_probability": "0.5",
        "general.sampling.xtc_threshold": "0.2",
        "general.sampling.mirostat": "2",
        "general.sampling.mirostat_tau": "4.5",
        "general.sampling.mirostat_eta": "0.3",
        "general.sampling.sequence": "top_k;temp;min-p",
    }
    assert gguf_sampling(meta.get) == {
        "temperature": 0.25,
        "repeat_last_n": 32,
        "xtc_probability": 0.5,
        "xtc_threshold": 0.2,
        "mirostat": 2,
        "mirostat_tau": 4.5,
        "mirostat_eta": 0.3,
        "samplers": ("top_k", "temperature", "min_p"),
    }


def test_an_unknown_sampler_in_the_gguf_order_leaves_the_order_alone(caplog: pytest.LogCaptureFixture) -> None:
    assert gguf_sampling({"general.sampling.sequence": "top_k;warp"}.get) == {}
    assert "general.sampling.sequence 'top_k;warp' is not used: unknown sampler 'warp'" in caplog.text


def test_every_sampler_field_takes_the_same_precedence() -> None:
    """Request > command line > GGUF > family > llama-server, for the samplers llama-server added too."""
    resolved = resolve_defaults(
        cli={"dry_multiplier": 0.8, "samplers": ("top_k", "temperature")},
        gguf_sampling={"mirostat": 2, "samplers": ("min_p",), "dry_multiplier": 0.1},
        identity=model_identity("LFM2.5 1.2B Instruct"),
    )
    p = resolved.params
    assert (p.dry_multiplier, p.samplers, p.mirostat, p.top_k, p.xtc_threshold) == (
        0.8,
        ("top_k", "temperature"),
        2,
        50,
        0.1,
    )
    assert [resolved.sources[n] for n in ("dry_multiplier", "samplers", "mirostat", "top_k", "xtc_threshold")] == [
        "command line",
        "command line",
        "GGUF general.sampling",
        "LFM family table (LFM2.5-1.2B-Instruct)",
        "llama-server default",
    ]
    request = p.updated({"dry_multiplier": 0.5, "samplers": ("xtc",)})
    assert (request.dry_multiplier, request.samplers, request.mirostat) == (0.5, ("xtc",), 2)
