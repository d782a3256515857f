"""The Gemma 3 writer: a text model llama.cpp runs as Gemma 3 (its tokens, sliding window, chat format) and a
vision projector mtmd reads as Gemma 3's, each picture a fixed run of tokens between Gemma's image markers."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel
from lfmserve.llama.mtmd import Media, Projector
from lfmserve.testing import (
    GEMMA3_CHAT_TEMPLATE,
    TinyGemma3,
    TinyGemma3Projector,
    tinted_pixels,
    write_gemma3_gguf,
    write_gemma3_mmproj_gguf,
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gemma3")


@pytest.fixture(scope="module")
def gemma3(folder: Path) -> Iterator[NativeModel]:
    model = NativeModel(write_gemma3_gguf(folder / "gemma3.gguf", TinyGemma3(seed=1)))
    yield model
    model.close()


@pytest.fixture(scope="module")
def projector(folder: Path, gemma3: NativeModel) -> Iterator[Projector]:
    path = write_gemma3_mmproj_gguf(folder / "mmproj.gguf", TinyGemma3Projector(seed=1))
    loaded = Projector(str(path), gemma3, n_threads=1)
    yield loaded
    loaded.close()


def test_the_same_seed_writes_the_same_files(tmp_path: Path) -> None:
    seeds = (3, 3, 4)
    texts = [write_gemma3_gguf(tmp_path / f"t{i}.gguf", TinyGemma3(seed=s)) for i, s in enumerate(seeds)]
    projectors = [
        write_gemma3_mmproj_gguf(tmp_path / f"p{i}.gguf", TinyGemma3Projector(seed=s)) for i, s in enumerate(seeds)
    ]
    for paths in (texts, projectors):
        digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]
        assert digests[0] == digests[1] != digests[2]


def test_gemma3_has_gemmas_tokens_and_sliding_window(gemma3: NativeModel) -> None:
    info = gemma3.info
    assert (info.architecture, info.vocab_type_name, info.n_swa, info.add_bos) == ("gemma3", "SPM", 512, True)
    assert (info.bos_token, info.eos_token, gemma3.bos_id, gemma3.eos_id) == ("<bos>", "<eos>", 2, 1)
    end_of_turn = gemma3.token_for("<end_of_turn>")
    assert end_of_turn is not None and gemma3.eog_tokens == frozenset({1, end_of_turn})
    tokens = gemma3.tokenize(" hello" * 8, add_special=False, parse_special=False)
    assert len(tokens) == 8 and len(set(tokens)) == 1
    text = "What is this? ünï 🙂\n"  # byte fallback for what no piece covers
    assert gemma3.detokenize(gemma3.tokenize(text, add_special=False, parse_special=False)) == text


def test_gemma3_chats_in_gemmas_format(gemma3: NativeModel) -> None:
    assert gemma3.info.chat_template == GEMMA3_CHAT_TEMPLATE
    rendered = gemma3.apply_builtin_template(GEMMA3_CHAT_TEMPLATE, [("user", "hi")], add_assistant=True)
    assert rendered == "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"


@pytest.mark.parametrize(("width", "height"), [(32, 32), (640, 480)])
def test_a_picture_is_64_tokens_between_the_image_markers(
    gemma3: NativeModel, projector: Projector, width: int, height: int
) -> None:
    assert (projector.vision, projector.audio) == (True, False)
    image = Media.image(tinted_pixels(width, height, seed=1))
    before, picture, after = projector.tokenize(f"What is this: {projector.marker}\n", [image])
    assert (before.kind, picture.kind, after.kind) == ("text", "image", "text")
    assert picture.n_tokens == 64
    assert before.tokens[-1] == gemma3.token_for("<start_of_image>")
    assert after.tokens[0] == gemma3.token_for("<end_of_image>")
    rows = projector.encode(picture)
    assert rows.shape == (64, 64) and bool(np.isfinite(rows).all())


def test_gemma3_decodes_a_prompt(gemma3: NativeModel) -> None:
    ctx = NativeContext(gemma3, n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1, n_threads=1, n_threads_batch=1)
    try:
        ctx.batch.add(gemma3.tokenize(" hello hello hello", add_special=True, parse_special=False), 0, 0, True)
        ctx.decode()
        assert ctx.seq_pos_max(0) == 3  # <bos> and three words
        assert bool(np.isfinite(ctx.logits(ctx.batch.n_tokens - 1)).all())
    finally:
        ctx.close()
