"""A llama context: decoding a batch, per-sequence memory, and saving and restoring a sequence's state."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lfmserve.engine.records import KvCacheOptions
from lfmserve.errors import EngineError
from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel
from lfmserve.testing import TinyLfm2, write_lfm2_gguf

PROMPT = [1, 6, 100, 101, 102, 103]


@pytest.fixture
def ctx(tiny_gguf: Path) -> Iterator[NativeContext]:
    model = NativeModel(tiny_gguf)
    context = NativeContext(model, n_ctx=512, n_batch=64, n_ubatch=64, n_seq_max=2, n_threads=1, n_threads_batch=1)
    yield context
    context.close()
    model.close()


def _decode(ctx: NativeContext, tokens: list[int], first_pos: int, seq: int) -> np.ndarray:
    ctx.batch.clear()
    index = ctx.batch.add(tokens, first_pos, seq, True)
    ctx.decode()
    return ctx.logits(index).copy()


def test_decoding_fills_a_sequence_and_gives_one_row_of_logits(ctx: NativeContext) -> None:
    logits = _decode(ctx, PROMPT, 0, 0)
    assert logits.shape == (475,) and np.isfinite(logits).all()
    assert (ctx.seq_pos_max(0), ctx.seq_pos_max(1)) == (5, -1)
    assert ctx.n_ctx == 512 and ctx.can_shift  # LFM2's hybrid memory says it can shift (lfmserve never does)


def test_a_restored_state_continues_exactly(ctx: NativeContext) -> None:
    _decode(ctx, PROMPT, 0, 0)
    state = ctx.get_state(0, partial=False)
    expected = _decode(ctx, [104], 6, 0)
    ctx.seq_clear(0)
    assert ctx.seq_pos_max(0) == -1
    ctx.set_state(1, state, partial=False)  # into another sequence
    assert ctx.seq_pos_max(1) == 5
    assert np.array_equal(_decode(ctx, [104], 6, 1), expected)


def test_a_saved_file_restores_the_tokens_and_the_state(ctx: NativeContext, tmp_path: Path) -> None:
    _decode(ctx, PROMPT, 0, 0)
    path = str(tmp_path / "slot.bin")
    written = ctx.save_seq_file(0, path, PROMPT)
    expected = _decode(ctx, [104], 6, 0)
    ctx.seq_clear(0)
    tokens, read = ctx.load_seq_file(1, path, capacity=64)
    assert (tokens, read) == (PROMPT, written)
    assert np.array_equal(_decode(ctx, [104], 6, 1), expected)
    with pytest.raises(EngineError, match="could not restore"):
        ctx.load_seq_file(1, str(tmp_path / "absent.bin"), capacity=64)


def test_a_copied_prefix_shares_the_cells(ctx: NativeContext) -> None:
    _decode(ctx, PROMPT, 0, 0)
    ctx.seq_cp(0, 1, 6)
    assert ctx.seq_pos_max(1) == 5


def test_a_quantized_kv_cache_keeps_a_sequence_in_fewer_bytes(tmp_path: Path) -> None:
    """-ctk/-ctv reach llama.cpp: the same tokens' state is smaller with q8_0 K and V (34 bytes per block of 32
    values instead of 64), and decoding works with flash attention forced on, as a quantized V needs."""
    # heads of 32 dimensions: q8_0's blocks must divide them
    spec = TinyLfm2(seed=2, arch="llama", n_embd=128, n_head=4, n_head_kv=2, attention_layers=(True,) * 4)
    model = NativeModel(write_lfm2_gguf(tmp_path / "llama-head32.gguf", spec))
    sizes = {}
    for kv in (KvCacheOptions(), KvCacheOptions(flash_attn="on", type_k="q8_0", type_v="q8_0")):
        context = NativeContext(
            model, n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1, n_threads=1, n_threads_batch=1, kv=kv
        )
        assert np.isfinite(_decode(context, list(range(5, 69)), 0, 0)).all()
        sizes[kv.type_k] = len(context.get_state(0, partial=False))
        context.close()
    model.close()
    values = 64 * 4 * (2 * 32) * 2  # tokens x layers x (KV heads x head size) x (K and V)
    assert sizes["f16"] - sizes["q8_0"] == values * 2 - values // 32 * 34
