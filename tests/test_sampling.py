import pytest

from lfmserve.sampling import LLAMA_SERVER_DEFAULTS, match_family, model_identity, resolve_defaults


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
    assert match_family(model_identity("gemma-3-270m")) is None
    resolved = resolve_defaults(cli={}, gguf_sampling={}, identity="gemma-3-270m")
    assert {k: getattr(resolved.params, k) for k in LLAMA_SERVER_DEFAULTS} == LLAMA_SERVER_DEFAULTS


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
