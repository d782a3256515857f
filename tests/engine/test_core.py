"""The engine on a real (tiny, random) LFM2 model: exact tokens, batching, stops, limits, cancel; and on a tiny
Gemma 3, how ``--swa-full`` makes a sliding-window model's cache truncate exactly."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path

import llama_cpp.llama_cpp as llama
import numpy as np
import pytest

from lfmserve.engine import core
from lfmserve.engine.core import Engine
from lfmserve.engine.records import EngineConfig, EngineRequest, KvCacheOptions, SamplingParams
from lfmserve.engine.stream import SyncStream
from lfmserve.errors import EngineError, InvalidRequest, RequestCancelled, Unavailable
from lfmserve.llama.model import NativeModel
from lfmserve.llama.mtmd import Projector
from lfmserve.testing import TinyGemma3, TinyGemma3Projector, write_gemma3_gguf, write_gemma3_mmproj_gguf
from tests.conftest import wait_until
from tests.engine.conftest import GREEDY, prompt, random_tokens, run, tokens_of
from tests.llama.test_control_vectors import write_control_vector


def test_greedy_is_deterministic_with_and_without_the_cache(engine: Engine, model: NativeModel) -> None:
    request = EngineRequest(prompt_tokens=prompt(model, "What is machine learning?"), sampling=GREEDY, max_tokens=24)
    first, second = run(engine, request), run(engine, request)
    uncached = run(
        engine, EngineRequest(prompt_tokens=request.prompt_tokens, sampling=GREEDY, max_tokens=24, cache_prompt=False)
    )
    assert len(tokens_of(first)) == 24
    assert tokens_of(first) == tokens_of(second) == tokens_of(uncached)
    assert second[-1].n_cached_tokens == len(request.prompt_tokens)  # the end-of-prompt checkpoint, with logits
    assert uncached[-1].n_cached_tokens == 0
    assert first[-1].finish_reason == "length" and first[-1].stop_type == "limit"


def test_batched_requests_give_the_same_tokens_as_alone(engine: Engine, model: NativeModel) -> None:
    texts = ["Hello there", "Tell me a story about a cat and a dog", "Weather in Paris?", "My name is Ada. " * 5]
    requests = [
        EngineRequest(prompt_tokens=prompt(model, t), sampling=GREEDY, max_tokens=16 + 3 * i, cache_prompt=False)
        for i, t in enumerate(texts)
    ]
    alone = [tokens_of(run(engine, r)) for r in requests]
    streams = [SyncStream() for _ in requests]
    for r, s in zip(requests, streams, strict=True):
        engine.submit(r, s)
    together = [tokens_of(list(s)) for s in streams]
    assert together == alone


def test_same_seed_same_output_different_seed_different_output(engine: Engine, model: NativeModel) -> None:
    def sample(seed: int) -> list[int]:
        params = SamplingParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=seed)
        return tokens_of(run(engine, EngineRequest(prompt_tokens=prompt(model, "Hi"), sampling=params, max_tokens=20)))

    assert sample(42) == sample(42)
    assert sample(42) != sample(43)


def test_context_size_zero_means_the_models_training_context(model: NativeModel) -> None:
    engine = Engine(model, EngineConfig(n_ctx=0, n_slots=1, n_batch=64, n_ubatch=64, n_threads=1))
    try:
        assert engine.n_ctx == engine.n_ctx_slot == model.info.n_ctx_train == 4096
    finally:
        engine.close()


def test_invalid_requests_are_refused_at_submit(engine: Engine) -> None:
    with pytest.raises(InvalidRequest, match="empty"):
        engine.submit(EngineRequest(prompt_tokens=()), SyncStream())
    with pytest.raises(InvalidRequest, match="Invalid token id 99999"):
        engine.submit(EngineRequest(prompt_tokens=(1, 99999)), SyncStream())
    with pytest.raises(InvalidRequest, match="id_slot 9"):
        engine.submit(EngineRequest(prompt_tokens=(1,), id_slot=9), SyncStream())


#: One slot on the attention-only model with context shifting: an :data:`ENDLESS` request (no max_tokens) never
#: ends by itself, so however late a test cancels it, it is still running.
SHIFTING = EngineConfig(n_ctx=512, n_slots=1, n_batch=64, n_ubatch=64, n_threads=1, context_shift=True)
ENDLESS = GREEDY.updated({"ignore_eos": True})


def test_cancel_frees_the_slot_and_the_engine_keeps_serving(llama_model: NativeModel) -> None:
    engine = Engine(llama_model, SHIFTING)
    try:
        stream = SyncStream()
        request_id = engine.submit(EngineRequest(prompt_tokens=prompt(llama_model, "Go on"), sampling=ENDLESS), stream)
        received = []
        with pytest.raises(RequestCancelled):  # only the cancel ends it
            for out in stream:
                received.append(out)
                if len(received) == 3:
                    engine.cancel(request_id)
        assert len(received) >= 3 and not any(out.finished for out in received)
        after = run(engine, EngineRequest(prompt_tokens=prompt(llama_model, "Hi"), sampling=GREEDY, max_tokens=3))
        assert after[-1].n_decoded == 3
    finally:
        engine.close()


def test_more_requests_than_slots_all_complete(engine: Engine, model: NativeModel) -> None:
    results: list[int] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        out = run(engine, EngineRequest(prompt_tokens=prompt(model, f"request {i}"), sampling=GREEDY, max_tokens=8))
        with lock:
            results.append(out[-1].n_decoded)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [8] * 10


def test_cancelling_a_request_still_waiting_for_a_slot_ends_it_before_it_starts(llama_model: NativeModel) -> None:
    engine = Engine(llama_model, SHIFTING)
    try:
        busy, waiting = SyncStream(), SyncStream()
        first = engine.submit(EngineRequest(prompt_tokens=prompt(llama_model, "one"), sampling=ENDLESS), busy)
        second = engine.submit(
            EngineRequest(prompt_tokens=prompt(llama_model, "two"), sampling=GREEDY, max_tokens=4), waiting
        )
        next(iter(busy))  # the first one is generating (until cancelled), so the second waits for its slot
        wait_until(lambda: engine.stats.n_requests_deferred == 1, "the second request waits")
        engine.cancel(second)
        received = []
        with pytest.raises(RequestCancelled, match=f"request {second} was cancelled"):
            for out in waiting:
                received.append(out)
        assert received == [] and engine.stats.n_requests_deferred == 1 and engine.n_waiting == 0
        engine.cancel(first)
    finally:
        engine.close()


def test_closing_ends_every_request_with_a_503_and_refuses_new_ones(model: NativeModel) -> None:
    engine = Engine(model, EngineConfig(n_ctx=512, n_slots=1, n_batch=64, n_ubatch=64, n_threads=1))
    running, waiting = SyncStream(), SyncStream()
    endless = GREEDY.updated({"ignore_eos": True})
    engine.submit(EngineRequest(prompt_tokens=prompt(model, "one"), sampling=endless, max_tokens=400), running)
    engine.submit(EngineRequest(prompt_tokens=prompt(model, "two"), sampling=endless, max_tokens=400), waiting)
    next(iter(running))
    engine.close()
    for stream in (running, waiting):
        with pytest.raises(Unavailable, match="the server is shutting down"):
            list(stream)
    with pytest.raises(Unavailable, match="the server is shutting down"):
        engine.submit(EngineRequest(prompt_tokens=(1, 2)), SyncStream())
    with pytest.raises(Unavailable, match="the server is shutting down"):
        engine.clear_slot(0)  # a command after the stop is refused, not left waiting forever
    engine.cancel(1)  # cancelling after the close is a no-op
    engine.close()  # and so is closing twice


# -- a sliding-window model, with and without --swa-full -------------------------------------------------


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NativeModel]:
    """The tiny Gemma 3 with an 8-token window, so that short prompts outrun it."""
    folder = tmp_path_factory.mktemp("gemma3")
    m = NativeModel(write_gemma3_gguf(folder / "gemma3.gguf", TinyGemma3(seed=1, sliding_window=8)))
    yield m
    m.close()


@pytest.mark.parametrize(
    ("swa_full", "edit_cached", "n_checkpoints", "restored_cached"),
    [
        (False, 0, 2, 0),  # the window dropped what the edit goes back to; the checkpoints are at the two ends
        (True, 41, 0, 60),  # every cell kept: cut at the edit, and after a restore only the last token again
    ],
)
def test_a_sliding_window_model_truncates_exactly_with_swa_full(
    gemma3: NativeModel, tmp_path: Path, swa_full: bool, edit_cached: int, n_checkpoints: int, restored_cached: int
) -> None:
    kv = KvCacheOptions(swa_full=swa_full)
    config = EngineConfig(n_ctx=512, n_slots=1, n_batch=256, n_ubatch=256, n_threads=1, cache_reuse=4, kv=kv)
    engine = Engine(gemma3, config)
    try:
        assert gemma3.info.n_swa == 8 and engine.shifts_kv is swa_full  # llama.cpp shifts a full window only
        base = (gemma3.bos_id, *random_tokens(gemma3, 60, seed=1))
        edited = base[:41] + random_tokens(gemma3, 20, seed=2)
        run(engine, EngineRequest(prompt_tokens=base, sampling=GREEDY, max_tokens=4))
        after_edit = run(engine, EngineRequest(prompt_tokens=edited, sampling=GREEDY, max_tokens=4))
        assert (after_edit[-1].n_cached_tokens, after_edit[-1].timings.prompt_n) == (edit_cached, 61 - edit_cached)
        assert engine.stats.n_checkpoints_saved == n_checkpoints
        engine.save_slot(0, str(tmp_path / "slot.bin"))
        engine.clear_slot(0)
        engine.restore_slot(0, str(tmp_path / "slot.bin"))  # a restored slot has no checkpoints
        restored = run(engine, EngineRequest(prompt_tokens=edited, sampling=GREEDY, max_tokens=4))
        assert (restored[-1].n_cached_tokens, restored[-1].timings.prompt_n) == (restored_cached, 61 - restored_cached)
        uncached = EngineRequest(prompt_tokens=edited, sampling=GREEDY, max_tokens=4, cache_prompt=False)
        assert tokens_of(after_edit) == tokens_of(restored) == tokens_of(run(engine, uncached))
    finally:
        engine.close()


def test_embeddings_decode_media_rows_as_the_projector_asks(gemma3: NativeModel, tmp_path: Path) -> None:
    """Gemma 3's projector has its image rows decoded with causal attention off (``llama.embedding`` tests it)."""
    projector = Projector(
        str(write_gemma3_mmproj_gguf(tmp_path / "mmproj.gguf", TinyGemma3Projector())), gemma3, n_threads=1
    )
    config = EngineConfig(n_ctx=512, n_slots=1, n_batch=256, n_ubatch=256, n_threads=1, embeddings=True)
    engines = [Engine(gemma3, config, projector=projector), Engine(gemma3, config)]
    try:
        assert [e.embeddings.context.non_causal_media for e in engines if e.embeddings] == [True, False]
    finally:
        for engine in engines:
            engine.close()
        projector.close()


def test_control_vectors_are_set_on_the_serving_context_and_key_the_disk_cache(
    model: NativeModel, tmp_path: Path
) -> None:
    n_layer = llama.llama_model_n_layer(model.handle)
    direction = np.random.default_rng(7).standard_normal(model.info.n_embd).astype(np.float32) * 4
    path = write_control_vector(tmp_path / "v.gguf", {f"direction.{n_layer - 1}": direction})
    plain = EngineConfig(n_ctx=256, n_slots=1, n_batch=64, n_ubatch=64, n_threads=1)
    steered = dataclasses.replace(plain, control_vectors=((path, 1.0),))

    def last_logits(config: EngineConfig) -> tuple[np.ndarray, str]:
        ctx = core._context(model, config)
        try:
            index = ctx.batch.add(list(range(10, 40)), 0, 0, True)
            ctx.decode()
            return ctx.logits(index).copy(), core._cache_identity(model, ctx, config)
        finally:
            ctx.close()

    (before, plain_key), (after, steered_key) = last_logits(plain), last_logits(steered)
    assert not np.allclose(before, after, atol=1e-4)
    assert plain_key != steered_key != last_logits(dataclasses.replace(steered, control_vectors=((path, 0.5),)))[1]
    with pytest.raises(EngineError, match="missing.gguf"):
        core._context(model, dataclasses.replace(plain, control_vectors=((str(tmp_path / "missing.gguf"), 1.0),)))
