"""``--rope-*`` / ``--yarn-*`` reach llama.cpp's context: its own values change nothing, others change the logits."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lfmserve.engine.records import RopeOptions
from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel


def _last_logits(model: NativeModel, rope: RopeOptions | None) -> np.ndarray:
    ctx = NativeContext(
        model, n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1, n_threads=1, n_threads_batch=1, rope=rope
    )
    try:
        index = ctx.batch.add(list(range(10, 40)), 0, 0, True)
        ctx.decode()
        return ctx.logits(index).copy()
    finally:
        ctx.close()


def test_the_models_own_rope_is_the_default_and_another_scale_changes_the_logits(tiny_gguf: Path) -> None:
    model = NativeModel(tiny_gguf)
    try:
        base = float(model.meta("lfm2.rope.freq_base") or 0)
        default = _last_logits(model, None)
        assert np.array_equal(_last_logits(model, RopeOptions()), default)
        assert np.array_equal(_last_logits(model, RopeOptions(freq_scale=1.0, freq_base=base)), default)
        assert not np.allclose(_last_logits(model, RopeOptions(freq_scale=0.5)), default, atol=1e-4)
        assert not np.allclose(_last_logits(model, RopeOptions(freq_base=base / 100)), default, atol=1e-4)
    finally:
        model.close()
