"""The context a slot gets, by llama-server's rule: llama.cpp pads the context, and each slot's share of it, to a
multiple of 256, and llama-server caps a slot at the model's training context. lfmserve computes the rule (the
router reports a model's ``n_ctx`` before any child loads it), so it is checked here against llama.cpp's own
contexts and against what a loaded engine uses."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import astuple

import llama_cpp.llama_cpp as llama
import pytest

from lfmserve.engine.core import Engine
from lfmserve.engine.records import ContextSizes, EngineConfig, EngineRequest, context_sizes
from lfmserve.engine.stream import SyncStream
from lfmserve.errors import ContextLengthExceeded
from lfmserve.llama.model import NativeModel
from lfmserve.loading.engine_config import slot_context
from lfmserve.settings import Settings
from lfmserve.testing import TinyLfm2, write_lfm2_gguf


@pytest.fixture(scope="module")
def short_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NativeModel]:
    """A model trained on 1000 tokens, not a multiple of 256."""
    path = write_lfm2_gguf(tmp_path_factory.mktemp("short") / "short.gguf", TinyLfm2(seed=1, context_length=1000))
    m = NativeModel(path)
    yield m
    m.close()


@pytest.mark.parametrize(
    ("n_ctx", "n_slots", "n_ctx_train", "shared", "sizes"),
    [
        (4096, 3, 32768, False, ContextSizes(n_ctx=4608, n_ctx_slot=1536)),  # 1365 padded; the context holds three
        (4096, 2, 32768, False, ContextSizes(n_ctx=4096, n_ctx_slot=2048)),
        (1000, 1, 32768, False, ContextSizes(n_ctx=1024, n_ctx_slot=1024)),
        (0, 4, 4096, False, ContextSizes(n_ctx=4096, n_ctx_slot=1024)),  # -c 0: the training context, shared out
        (0, 1, 1000, False, ContextSizes(n_ctx=1024, n_ctx_slot=1000)),  # padded past training, which caps a slot
        (8192, 2, 1000, False, ContextSizes(n_ctx=8192, n_ctx_slot=1000)),
        (1000, 4, 32768, True, ContextSizes(n_ctx=1024, n_ctx_slot=1024)),  # --kv-unified: a slot may fill it all
        (1000, 3, 0, False, ContextSizes(n_ctx=1536, n_ctx_slot=512)),  # no training context known: no cap
    ],
)
def test_the_context_and_a_slots_share_are_padded_to_256_and_a_slot_capped_at_training(
    n_ctx: int, n_slots: int, n_ctx_train: int, shared: bool, sizes: ContextSizes
) -> None:
    assert context_sizes(n_ctx, n_slots, n_ctx_train=n_ctx_train, shared=shared) == sizes


@pytest.mark.parametrize(("n_ctx", "n_slots"), [(4096, 3), (4096, 2), (1000, 1), (0, 1), (0, 3), (300, 2)])
def test_llama_cpp_sizes_its_context_and_slots_by_the_same_rule(
    short_model: NativeModel, n_ctx: int, n_slots: int
) -> None:
    """A context made as llama-server makes it (one sequence per slot, not unified): its ``n_ctx``, and its
    ``n_ctx_seq`` capped at the training context as llama-server's ``n_ctx_slot()`` caps it."""
    params = llama.llama_context_default_params()
    params.n_ctx, params.n_seq_max, params.kv_unified = n_ctx, n_slots, False
    params.n_batch = params.n_ubatch = 64
    params.n_threads = params.n_threads_batch = 1
    ctx = llama.llama_init_from_model(short_model.handle, params)
    try:
        theirs = (llama.llama_n_ctx(ctx), min(llama.llama_n_ctx_seq(ctx), short_model.info.n_ctx_train))
    finally:
        llama.llama_free(ctx)
    assert astuple(context_sizes(n_ctx, n_slots, n_ctx_train=1000)) == theirs


@pytest.mark.parametrize(
    ("which", "n_ctx", "n_slots", "sizes"), [("model", 4096, 3, (4608, 1536)), ("short_model", 0, 1, (1024, 1000))]
)
def test_an_engine_holds_every_slots_share_and_limits_a_request_to_it(
    request: pytest.FixtureRequest, which: str, n_ctx: int, n_slots: int, sizes: tuple[int, int]
) -> None:
    model: NativeModel = request.getfixturevalue(which)
    engine = Engine(model, EngineConfig(n_ctx=n_ctx, n_slots=n_slots, n_batch=64, n_ubatch=64, n_threads=1))
    try:
        assert (engine.n_ctx, engine.n_ctx_slot) == sizes
        with pytest.raises(ContextLengthExceeded) as refused:  # a prompt must leave its slot room for a token
            engine.submit(EngineRequest(prompt_tokens=(1,) * sizes[1]), SyncStream())
        assert (refused.value.n_prompt_tokens, refused.value.n_ctx) == (sizes[1], sizes[1])
    finally:
        engine.close()


def test_the_flags_give_the_rule_its_sizes() -> None:
    assert slot_context(Settings.of(ctx_size=4096, parallel=3), 32768) == 1536
    assert slot_context(Settings.of(ctx_size=4096, parallel=3, kv_unified=True), 32768) == 4096
    assert slot_context(Settings(), 4096) == 1024  # -c 0 -np 4: the training context over the default four slots
