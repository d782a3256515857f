"""A llama context: decoding a batch, per-sequence memory, and saving and restoring a sequence's state."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lfmserve.errors import EngineError
from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel

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
