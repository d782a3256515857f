"""A loaded GGUF: its vocabulary (tokens, pieces, special tokens), metadata, and what it says about itself."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from lfmserve.errors import EngineError
from lfmserve.llama.backend import amx_built_in
from lfmserve.llama.model import NativeModel
from lfmserve.testing import TinyGemma3, TinyLfm2, write_gemma3_gguf, write_lfm2_gguf


@pytest.fixture(scope="module")
def model(tiny_gguf: Path) -> Iterator[NativeModel]:
    loaded = NativeModel(tiny_gguf)
    yield loaded
    loaded.close()


def test_special_tokens_are_parsed_only_when_asked(model: NativeModel) -> None:
    assert model.tokenize("<|im_start|>", add_special=False, parse_special=True) == [6]
    literal = model.tokenize("<|im_start|>", add_special=False, parse_special=False)
    assert 6 not in literal and model.detokenize(literal) == "<|im_start|>"
    assert model.tokenize("Hi", add_special=True, parse_special=True)[0] == 1  # BOS


def test_a_rendered_chat_gets_no_second_bos(model: NativeModel) -> None:
    with_bos = model.tokenize_chat("<|startoftext|><|im_start|>user\nHi")
    without = model.tokenize_chat("<|im_start|>user\nHi")
    assert with_bos == without and with_bos[:2] == [1, 6]


def test_pieces_hide_control_tokens_unless_asked(model: NativeModel) -> None:
    assert model.token_to_piece(7) == b"" and model.token_to_piece(7, special=True) == b"<|im_end|>"
    assert model.token_text(7) == "<|im_end|>"
    assert model.is_control(7) and not model.is_control(model.tokenize("a", add_special=False, parse_special=False)[0])
    assert model.detokenize([6, 7], special=True) == "<|im_start|><|im_end|>" and model.detokenize([]) == ""
    assert len(model.all_pieces()) == model.n_vocab == 475


def test_joined_pieces_round_trip_where_detokenize_cleans_up_spaces(model: NativeModel) -> None:
    """llama-server's /detokenize joins the pieces; llama_detokenize's clean-up drops the space before "?"."""
    text = "What is the capital of France ?"
    ids = model.tokenize(text, add_special=False, parse_special=True)
    assert model.join_pieces(ids) == text and model.detokenize(ids) == "What is the capital of France?"
    unicode = "unicode 媽 and emoji 🤗"
    ids = model.tokenize(unicode, add_special=False, parse_special=True)
    assert b"\xe5" in [model.token_to_piece(t) for t in ids]  # 媽 is three one-byte tokens here
    assert model.join_pieces(ids) == unicode  # pieces that split a character are joined as bytes first
    assert model.join_pieces([1, 6]) == "<|startoftext|><|im_start|>" and model.join_pieces([]) == ""


def test_end_of_generation_and_valid_ids(model: NativeModel) -> None:
    assert model.eog_tokens == frozenset({2, 7}) and model.is_eog(7) and not model.is_eog(6)
    assert (
        model.is_valid_token(0),
        model.is_valid_token(474),
        model.is_valid_token(475),
        model.is_valid_token(-1),
    ) == (
        True,
        True,
        False,
        False,
    )


def test_metadata_and_info(model: NativeModel) -> None:
    assert model.meta("general.architecture") == "lfm2" and model.meta("general.no.such.key") is None
    info = model.info
    assert (info.name, info.architecture, info.n_vocab, info.n_embd, info.n_ctx_train, info.vocab_type_name) == (
        "Tiny-LFM2-Test",
        "lfm2",
        475,
        64,
        4096,
        "BPE",
    )
    # hybrid: its convolution state cannot drop a tail, whatever the sliding window keeps
    assert info.needs_checkpoints(swa_full=False) and info.needs_checkpoints(swa_full=True)
    assert info.meta_json(512)["n_ctx"] == 512 and info.to_json()["is_hybrid"] is True


def test_a_sliding_window_model_needs_checkpoints_unless_its_window_keeps_every_cell(tmp_path: Path) -> None:
    model = NativeModel(write_gemma3_gguf(tmp_path / "gemma3.gguf", TinyGemma3(seed=1, sliding_window=8)))
    try:
        info = model.info
        assert (info.n_swa, info.is_hybrid, info.is_recurrent) == (8, False, False)
        assert info.needs_checkpoints(swa_full=False) and not info.needs_checkpoints(swa_full=True)
    finally:
        model.close()


def test_a_long_metadata_value_is_read_whole(tmp_path: Path) -> None:
    name = "Long-Name-" + "x" * 5000
    model = NativeModel(write_lfm2_gguf(tmp_path / "long.gguf", TinyLfm2(seed=1, name=name)))
    try:
        assert model.meta("general.name") == name and model.info.name == name
    finally:
        model.close()


def test_a_missing_or_broken_file_is_an_engine_error(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="model file not found"):
        NativeModel(tmp_path / "absent.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf")
    with pytest.raises(EngineError) as info:
        NativeModel(junk)
    assert str(info.value) == f"failed to load model from {junk}: invalid magic characters: 'not ', expected 'GGUF'"
    with pytest.raises(EngineError, match="model path is a directory"):
        NativeModel(tmp_path)


def test_builtin_templates_format_known_templates_and_refuse_others(model: NativeModel) -> None:
    prompt = model.apply_builtin_template("chatml", [("user", "Hi")], add_assistant=True)
    assert prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(EngineError, match="not one llama.cpp knows without --jinja"):
        model.apply_builtin_template("{{ nothing known }}", [("user", "Hi")], add_assistant=True)


def _weight_buffers(path: Path, caplog: pytest.LogCaptureFixture, **options: bool) -> set[str]:
    """The buffer types llama.cpp put the weights in, as its load log names them."""
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="lfmserve.llama_cpp"):
        NativeModel(path, **options).close()
    return set(re.findall(r"load_tensors:\s+(\S+) model buffer size", caplog.text))


def test_weights_are_repacked_unless_llama_cpp_would_hand_them_to_amx(
    gemma_gguf: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plain = _weight_buffers(gemma_gguf, caplog, repack=False)
    repacked = _weight_buffers(gemma_gguf, caplog, repack=True)
    assert plain == {"CPU_Mapped"}
    if amx_built_in():
        # What crashes a decode of two tokens or more; by default the weights stay where they were mapped.
        assert "AMX" in repacked
        assert _weight_buffers(gemma_gguf, caplog) == plain
    else:
        assert _weight_buffers(gemma_gguf, caplog) == repacked
