"""The engine's counters and a request's timings mean what llama-server's do (``/metrics``, ``timings``).

On the tiny attention-only model: its prompts prefill without checkpoints, so every decode is known.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from lfmserve.engine.core import Engine
from lfmserve.engine.embeddings import EmbeddingRequest, EmbeddingResult
from lfmserve.engine.records import EngineConfig, EngineRequest
from lfmserve.engine.stream import SyncStream
from lfmserve.errors import RequestCancelled
from lfmserve.llama.model import NativeModel
from tests.engine.conftest import GREEDY, random_tokens, run


def _request(prompt: tuple[int, ...], max_tokens: int, **options: object) -> EngineRequest:
    sampling = replace(GREEDY, ignore_eos=True)  # exactly ``max_tokens``: a random model may end early
    return EngineRequest(prompt_tokens=prompt, sampling=sampling, max_tokens=max_tokens, **options)  # type: ignore[arg-type]


def test_prompt_and_generation_counters_after_known_requests(llama_model: NativeModel) -> None:
    engine = Engine(llama_model, EngineConfig(n_ctx=512, n_slots=1, n_batch=256, n_ubatch=256, n_threads=2))
    try:
        prompt = random_tokens(llama_model, 40, seed=1)
        first = run(engine, _request(prompt, 8))[-1]
        s = engine.stats
        # one decode for the prompt, then one per generated token but the first (it came with the prompt's)
        assert (s.n_prompt_tokens, s.n_cached_tokens, s.n_predicted_tokens, s.n_predicted_steps) == (40, 0, 8, 7)
        assert (s.n_decode_calls, s.n_busy_slots_sum, s.n_tokens_max) == (8, 8, 47)
        assert s.prompt_seconds > 0 and s.predicted_seconds == pytest.approx(first.timings.predicted_ms / 1e3)
        again = run(engine, _request(prompt, 1))[-1]  # the same prompt: all but its last token is cached
        assert (again.timings.cache_n, again.timings.prompt_n) == (39, 1)
        assert (s.n_prompt_tokens, s.n_cached_tokens, s.n_predicted_tokens, s.n_predicted_steps) == (41, 39, 9, 7)
        assert s.n_decode_calls == 9
    finally:
        engine.close()


def test_generation_rates_leave_out_the_first_token(llama_model: NativeModel) -> None:
    engine = Engine(llama_model, EngineConfig(n_ctx=512, n_slots=1, n_batch=256, n_ubatch=256, n_threads=2))
    try:
        prompt = random_tokens(llama_model, 12, seed=2)
        one = run(engine, _request(prompt, 1, cache_prompt=False))[-1].timings.to_json()
        assert (one["predicted_n"], one["predicted_ms"], one["predicted_per_second"]) == (1, 0.0, 0.0)
        assert one["predicted_per_token_ms"] == 0.0 and one["prompt_ms"] > 0 and one["prompt_per_token_ms"] > 0
        sixteen = run(engine, _request(prompt, 16, cache_prompt=False))[-1].timings.to_json()
        assert sixteen["predicted_n"] == 16 and sixteen["predicted_ms"] > 0
        assert sixteen["predicted_per_second"] == pytest.approx(1e3 * 15 / sixteen["predicted_ms"], rel=1e-12)
        assert sixteen["predicted_per_token_ms"] == pytest.approx(sixteen["predicted_ms"] / 15, rel=1e-12)
    finally:
        engine.close()


def test_a_slot_shows_its_running_request_then_its_last_with_counters_reset(llama_model: NativeModel) -> None:
    engine = Engine(llama_model, EngineConfig(n_ctx=1024, n_slots=2, n_batch=256, n_ubatch=256, n_threads=2))
    try:
        assert engine.slot_task(1) is None
        request = _request(random_tokens(llama_model, 20, seed=3), 480, id_slot=1)
        stream = SyncStream()
        request_id = engine.submit(request, stream)
        next(iter(stream))  # the first token: the request runs for hundreds of steps more
        running = engine.slot_task(1)
        engine.cancel(request_id)
        with pytest.raises(RequestCancelled):
            list(stream)
        assert running is not None and running.running and running.request == request
        assert (running.n_prompt_processed, running.n_prompt_cached) == (20, 0) and running.n_decoded >= 1
        assert running.n_remain == 480 - running.n_decoded
        idle = engine.slot_task(1)
        assert idle is not None and idle.id_task == request_id and idle.request == request
        assert (idle.running, idle.n_decoded, idle.n_remain, idle.n_prompt_processed) == (False, 0, -1, 0)
    finally:
        engine.close()


def test_embedding_inputs_count_as_prompt_tokens_and_decodes(llama_model: NativeModel) -> None:
    config = EngineConfig(n_ctx=512, n_slots=1, n_batch=64, n_ubatch=64, n_threads=1, embeddings=True, pooling="last")
    engine = Engine(llama_model, config)
    try:
        done = threading.Event()
        results: list[EmbeddingResult | BaseException] = []

        class Sink:
            def put(self, item: EmbeddingResult | BaseException) -> None:
                results.append(item)
                done.set()

        inputs = tuple(random_tokens(llama_model, 30, seed=i) for i in range(4))  # two decodes of two inputs
        engine.submit_embeddings(EmbeddingRequest(inputs), Sink())
        assert done.wait(60) and isinstance(results[0], EmbeddingResult)
        s = engine.stats
        assert (s.n_prompt_tokens, s.n_decode_calls, s.n_predicted_tokens) == (120, 2, 0) and s.prompt_seconds > 0
    finally:
        engine.close()


def test_a_prompts_timings_grow_with_each_prefilled_batch(llama_model: NativeModel) -> None:
    engine = Engine(llama_model, EngineConfig(n_ctx=512, n_slots=1, n_batch=32, n_ubatch=32, n_threads=2))
    try:
        outputs = run(engine, _request(random_tokens(llama_model, 80, seed=4), 2, return_progress=True))
        reports = [(out.progress, out.timings) for out in outputs if out.progress is not None]
        # before any decode, then after each of the three batches (32, 32 and 16 tokens)
        assert [(p.processed, t.prompt_n) for p, t in reports] == [(0, 0), (32, 32), (64, 64), (80, 80)]
        assert reports[0][1].prompt_ms == 0.0 and 0 < reports[1][1].prompt_ms <= reports[2][1].prompt_ms
        assert reports[-1][1].prompt_ms == outputs[-1].timings.prompt_ms
    finally:
        engine.close()
