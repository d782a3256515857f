import pytest

from lfmserve.loading.defaults import match_family, model_identity, resolve_defaults


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
        "seed": -1,
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
