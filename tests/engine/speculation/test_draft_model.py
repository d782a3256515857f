"""``draft-simple``: a model of the same vocabulary guesses greedily, up to the request's limit and ``n_max``,
stopping below ``p_min``, never guessing a banned token; a model of another vocabulary is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as llama
import numpy as np
import pytest

from lfmserve.engine.records import KvCacheOptions
from lfmserve.engine.speculation.draft_model import DraftModel, DraftRequest, vocab_mismatch
from lfmserve.errors import EngineError
from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel
from lfmserve.testing import TinyLfm2, write_lfm2_gguf
from tests.engine.conftest import prompt
from tests.engine.speculation.conftest import spec_config, spec_engine


def _draft_model(
    target: NativeModel, *, n_max: int = 3, p_min: float = 0.0, n_slots: int = 2, **context: Any
) -> DraftModel:
    """The target's own weights as its draft model (two slots, one thread, unless ``context`` says otherwise)."""
    return DraftModel(
        target,
        NativeModel(target.path),
        n_ctx=512,
        n_batch=64,
        n_slots=n_slots,
        n_threads=1,
        n_max=n_max,
        p_min=p_min,
        **context,
    )


def _greedy(model: NativeModel, tokens: tuple[int, ...], n: int) -> list[int]:
    """``n`` tokens decoded greedily after ``tokens``, one at a time after the first (as the draft model does)."""
    ctx = NativeContext(model, n_ctx=512, n_batch=64, n_ubatch=64, n_seq_max=1, n_threads=1, n_threads_batch=1)
    try:
        ctx.batch.add(tokens, 0, 0, True)
        ctx.decode()
        out = [int(np.argmax(ctx.logits(len(tokens) - 1)))]
        while len(out) < n:
            ctx.batch.clear()
            ctx.batch.add((out[-1],), len(tokens) + len(out) - 1, 0, True)
            ctx.decode()
            out.append(int(np.argmax(ctx.logits(0))))
        return out
    finally:
        ctx.close()


def test_a_model_drafting_for_itself_guesses_what_greedy_decoding_samples(llama_model: NativeModel) -> None:
    target = llama_model
    tokens = prompt(target, "Count with me")
    assert vocab_mismatch(target, target) is None
    drafter = _draft_model(target, n_max=3)
    try:
        expected = _greedy(target, tokens, 3)
        # The prompt's last token as the one just sampled: n_max (3) guesses, though the request allows 5.
        assert drafter.draft([DraftRequest(0, tokens[:-1], tokens[-1], limit=5)]) == [expected]
        # Two slots in one call (slot 0 cut back to the prompt first): each at most its limit and n_max.
        both = drafter.draft(
            [DraftRequest(0, tokens[:-1], tokens[-1], limit=2), DraftRequest(1, tokens[:-1], tokens[-1], limit=9)]
        )
        assert both == [expected[:2], expected]
    finally:
        drafter.close()


def test_a_banned_token_is_never_guessed_and_p_min_stops_a_draft(llama_model: NativeModel) -> None:
    target = llama_model
    tokens = prompt(target, "Count with me")
    first = _greedy(target, tokens, 1)[0]
    drafter = _draft_model(target)
    try:
        banned = drafter.draft([DraftRequest(0, tokens[:-1], tokens[-1], limit=3, banned=frozenset({first}))])[0]
        assert len(banned) == 3 and first not in banned
    finally:
        drafter.close()
    # A random model's best token never has all of the top 10's probability.
    sure_only = _draft_model(target, p_min=1.0)
    try:
        assert sure_only.draft([DraftRequest(0, tokens[:-1], tokens[-1], limit=3)]) == [[]]
    finally:
        sure_only.close()


def test_a_draft_model_of_another_vocabulary_is_refused(tiny_gguf: Path, tmp_path: Path) -> None:
    other = write_lfm2_gguf(tmp_path / "other.gguf", TinyLfm2(seed=1, n_vocab=1024))
    model = NativeModel(tiny_gguf)
    try:
        with pytest.raises(EngineError, match=r"cannot draft for .*: the vocabularies differ in size by more than 128"):
            spec_engine(model, spec_config("draft-simple", n=1, draft_model=other))
    finally:
        model.close()


def test_the_draft_context_takes_its_own_threads_and_kv_cache_types(llama_model: NativeModel) -> None:
    """``-td 1 -tbd 2``: the draft context's thread counts; ``-ctkd/-ctvd f32``: its KV cache, larger than f16's for
    the same tokens (the tiny model's heads are too narrow for the quantized types' 32-value blocks)."""
    tokens = prompt(llama_model, "Count with me")
    sizes = {}
    for kind in ("f16", "f32"):
        drafter = _draft_model(
            llama_model, n_max=2, n_slots=1, n_threads_batch=2, kv=KvCacheOptions(type_k=kind, type_v=kind)
        )
        try:
            handle = drafter._ctx.handle
            assert (llama.llama_n_threads(handle), llama.llama_n_threads_batch(handle)) == (1, 2)
            assert len(drafter.draft([DraftRequest(0, tokens[:-1], tokens[-1], limit=2)])[0]) == 2
            sizes[kind] = drafter._ctx.get_state(0, partial=False).size
        finally:
            drafter.close()
    assert sizes["f32"] > sizes["f16"]
