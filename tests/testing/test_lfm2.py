"""The test-model generator writes GGUFs llama.cpp loads: LFM2 and LFM2-MoE, real special ids, deterministically.

How fast it writes them is measured by ``bench/model_writer.py``, not here."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel
from lfmserve.loading.defaults import gguf_sampling
from lfmserve.testing import BOS_ID, EOS_ID, LFM2_SPECIAL_TOKENS, TinyLfm2, write_lfm2_gguf


def test_the_same_seed_writes_the_same_file(tmp_path: Path) -> None:
    a = write_lfm2_gguf(tmp_path / "a.gguf", TinyLfm2(seed=3))
    b = write_lfm2_gguf(tmp_path / "b.gguf", TinyLfm2(seed=3))
    c = write_lfm2_gguf(tmp_path / "c.gguf", TinyLfm2(seed=4))
    digest = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b, c)]
    assert digest[0] == digest[1] != digest[2]


def test_lfm2_loads_as_a_hybrid_with_lfm2_special_tokens(tiny_gguf: Path) -> None:
    model = NativeModel(tiny_gguf)
    info = model.info
    assert (info.architecture, info.is_hybrid, info.is_recurrent, info.add_bos) == ("lfm2", True, False, True)
    assert (model.bos_id, model.eos_id, info.bos_token, info.eos_token) == (
        BOS_ID,
        EOS_ID,
        "<|startoftext|>",
        "<|im_end|>",
    )
    for token_id, text in enumerate(LFM2_SPECIAL_TOKENS):
        assert model.tokenize(text, add_special=False, parse_special=True) == [token_id]
    assert model.is_eog(EOS_ID) and not model.is_eog(6)
    text = "Hello there, what is machine learning? ünï 🙂"
    tokens = model.tokenize(text, add_special=False, parse_special=False)
    assert len(tokens) < len(text.encode()) and model.detokenize(tokens) == text
    assert info.chat_template is not None and "<|im_start|>" in info.chat_template
    model.close()


@pytest.mark.parametrize("spec", [TinyLfm2(seed=2, n_expert=4), TinyLfm2(seed=2, sampling={"temp": 0.5, "top_k": 9})])
def test_moe_and_sampling_keys_load_and_decode(tmp_path: Path, spec: TinyLfm2) -> None:
    path = write_lfm2_gguf(tmp_path / "m.gguf", spec)
    model = NativeModel(path)
    assert model.info.architecture == ("lfm2moe" if spec.n_expert else "lfm2")
    assert gguf_sampling(model.meta) == ({"temperature": 0.5, "top_k": 9} if spec.sampling else {})
    ctx = NativeContext(model, n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1, n_threads=1, n_threads_batch=1)
    ctx.batch.add([1, 6, 100, 101], 0, 0, True)
    ctx.decode()
    assert ctx.seq_pos_max(0) == 3
    ctx.close()
    model.close()
