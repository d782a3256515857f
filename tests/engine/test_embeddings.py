"""Embeddings on the engine thread: llama.cpp's normalisations, inputs packed into few decodes (one at a time for
hybrid models), the same vectors however they are packed, and generation unchanged beside them."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from lfmserve.engine.core import Engine
from lfmserve.engine.core import _embedding_context as embedding_context
from lfmserve.engine.embeddings import (
    EmbeddingQueue,
    EmbeddingRequest,
    EmbeddingResult,
    check_embedding_request,
    normalized,
    packed,
)
from lfmserve.engine.media import prompt_from_chunks
from lfmserve.engine.records import EngineConfig, EngineRequest
from lfmserve.errors import EngineError, InvalidRequest, NotSupported
from lfmserve.llama.embedding import EmbeddingContext
from lfmserve.llama.model import NativeModel
from lfmserve.llama.mtmd import Media, Projector
from lfmserve.testing import tinted_pixels
from tests.engine.conftest import GREEDY, hold_encodes_beside, prompt, random_tokens, run, tokens_of


class _Waiting:
    """A result sink the test thread waits on."""

    def __init__(self) -> None:
        self.item: EmbeddingResult | BaseException | None = None
        self.done = threading.Event()

    def put(self, item: EmbeddingResult | BaseException) -> None:
        self.item = item
        self.done.set()

    def result(self) -> EmbeddingResult:
        assert self.done.wait(60)
        assert isinstance(self.item, EmbeddingResult), self.item
        return self.item


# -- arithmetic ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("norm", "expected"),
    [
        (2, [0.6, -0.8]),
        (-1, [3.0, -4.0]),
        (0, [24570.0, -32760.0]),  # max-abs scaled to the int16 range
        (1, [3 / 7, -4 / 7]),
        (3, [3 / 91 ** (1 / 3), -4 / 91 ** (1 / 3)]),
    ],
)
def test_normalisation_is_llama_cpps(norm: int, expected: list[float]) -> None:
    out = normalized(np.array([3.0, -4.0], dtype=np.float32), norm)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert normalized(np.zeros(3, dtype=np.float32), 2).tolist() == [0.0, 0.0, 0.0]


def test_a_huge_p_overflows_to_zeros_as_in_llama_cpp() -> None:
    for norm in (2**31 - 1, -(2**31)):
        assert normalized(np.array([3.0, -4.0], dtype=np.float32), norm).tolist() == [0.0, 0.0]


class _FailingOnce:
    """Stands in for an embedding context: the first decode raises, the others give ones."""

    n_ubatch, n_seq_max, pooling = 64, 8, "mean"

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, inputs: list[tuple[int, ...]]) -> list[np.ndarray]:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("boom")
        return [np.ones(4, dtype=np.float32) for _ in inputs]


def test_a_failed_decode_answers_its_request_only_and_the_queue_goes_on() -> None:
    queue = EmbeddingQueue(_FailingOnce())  # type: ignore[arg-type]
    first, second = _Waiting(), _Waiting()
    queue.add(EmbeddingRequest(((1, 2), (3,))), first)
    queue.add(EmbeddingRequest(((4,),)), second)
    while queue.pending:
        queue.run_one()
    assert isinstance(first.item, EngineError) and first.item.message == "embedding failed: boom"
    assert [v.tolist() for v in second.result().vectors] == [[0.5, 0.5, 0.5, 0.5]]


def test_inputs_pack_in_order_within_the_token_and_sequence_limits() -> None:
    assert packed([5, 5, 5], 10, 64) == [range(0, 2), range(2, 3)]
    assert packed([5, 5, 5], 10, 1) == [range(0, 1), range(1, 2), range(2, 3)]
    assert packed([3] * 7, 100, 3) == [range(0, 3), range(3, 6), range(6, 7)]
    assert packed([10, 1], 10, 64) == [range(0, 1), range(1, 2)]
    assert packed([], 10, 64) == []


def test_requests_are_checked_with_llama_servers_messages() -> None:
    def refused(request: EmbeddingRequest) -> tuple[str, str | None]:
        with pytest.raises(InvalidRequest) as caught:
            check_embedding_request(request, n_ubatch=8, n_vocab=100, media=False)
        return caught.value.message, caught.value.param

    assert refused(EmbeddingRequest(())) == ('"input" must not be empty', "input")
    assert refused(EmbeddingRequest(((1, 2), ()))) == ("Input content cannot be empty", "input.1")
    assert refused(EmbeddingRequest(((1,) * 9,))) == (
        "input (9 tokens) is too large to process. increase the physical batch size (current batch size: 8)",
        "input.0",
    )
    assert refused(EmbeddingRequest(((1, 100),))) == ("Invalid token id 100 (vocabulary has 100 tokens)", "input.0")
    assert refused(EmbeddingRequest(((1,),) * 2049)) == ("at most 2048 inputs per request (got 2049)", "input")
    check_embedding_request(EmbeddingRequest(((1,) * 8,)), n_ubatch=8, n_vocab=100, media=False)


# -- the embedding context -------------------------------------------------------------------------


def test_an_attention_model_packs_many_inputs_into_one_decode_with_the_same_vectors(llama_model: NativeModel) -> None:
    context = EmbeddingContext(llama_model, pooling="mean", n_ubatch=256, n_seq_max=64, n_threads=1)
    try:
        inputs = tuple(random_tokens(llama_model, 3 + i % 9, seed=i) for i in range(40))  # 276 tokens in all
        queue = EmbeddingQueue(context)
        sink = _Waiting()
        queue.add(EmbeddingRequest(inputs), sink)
        while queue.pending:
            queue.run_one()
        assert queue.n_decodes == len(packed([len(t) for t in inputs], 256, 64)) == 2
        together = sink.result()
        assert together.n_prompt_tokens == sum(len(t) for t in inputs)
        alone = [normalized(context.embed([tokens])[0], 2) for tokens in inputs]
        for a, b in zip(together.vectors, alone, strict=True):  # equal but for float rounding in other kernels
            assert a.shape == (64,)
            assert float(a @ b) > 0.9999
            assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-6)
        assert not np.allclose(alone[0], alone[1])  # the inputs give different vectors
    finally:
        context.close()


def test_a_hybrid_model_embeds_one_input_per_decode(model: NativeModel) -> None:
    """LFM2 with inputs of unequal lengths in one decode aborts in llama.cpp's mean pooling: never packed."""
    context = EmbeddingContext(model, pooling="mean", n_ubatch=256, n_seq_max=64, n_threads=1)
    try:
        assert context.n_seq_max == 1 and context.pooling == "mean"
        queue = EmbeddingQueue(context)
        sink = _Waiting()
        inputs = tuple(random_tokens(model, n, seed=n) for n in (5, 9, 2, 17))
        queue.add(EmbeddingRequest(inputs, normalize=-1), sink)
        while queue.pending:
            queue.run_one()
        assert queue.n_decodes == 4
        vectors = sink.result().vectors
        np.testing.assert_array_equal(vectors[1], context.embed([inputs[1]])[0])  # not normalised (-1)
    finally:
        context.close()


def test_pooling_none_gives_a_row_per_token(llama_model: NativeModel) -> None:
    context = EmbeddingContext(llama_model, pooling="none", n_ubatch=64, n_seq_max=8, n_threads=1)
    try:
        rows = context.embed([random_tokens(llama_model, 5, 1), random_tokens(llama_model, 3, 2)])
        assert [r.shape for r in rows] == [(5, 64), (3, 64)]
        mean = EmbeddingContext(llama_model, pooling="mean", n_ubatch=64, n_seq_max=8, n_threads=1)
        try:  # mean pooling is the mean of these rows
            np.testing.assert_allclose(
                mean.embed([random_tokens(llama_model, 5, 1)])[0], rows[0].mean(axis=0), atol=1e-5
            )
        finally:
            mean.close()
    finally:
        context.close()


# -- in the engine ------------------------------------------------------------------------------------


def test_the_engine_embeds_between_generation_steps_without_changing_the_generation(
    llama_model: NativeModel,
) -> None:
    config = EngineConfig(n_ctx=1024, n_slots=2, n_batch=64, n_ubatch=64, n_threads=1, embeddings=True, pooling="last")
    engine = Engine(llama_model, config)
    plain = Engine(llama_model, EngineConfig(n_ctx=1024, n_slots=2, n_batch=64, n_ubatch=64, n_threads=1))
    try:
        request = EngineRequest(prompt_tokens=prompt(llama_model, "Tell a story"), sampling=GREEDY, max_tokens=24)
        alone = tokens_of(run(plain, request))
        sink = _Waiting()
        inputs = tuple(random_tokens(llama_model, 30, seed=i) for i in range(12))  # 6 decodes of 2 inputs
        stream_result: list[list[int]] = []
        runner = threading.Thread(target=lambda: stream_result.append(tokens_of(run(engine, request))))
        runner.start()
        engine.submit_embeddings(EmbeddingRequest(inputs), sink)
        runner.join(60)
        vectors = sink.result().vectors
        assert stream_result == [alone]
        assert engine.embeddings is not None and engine.embeddings.n_decodes == 6
        # The engine's context decodes on its thread only: the same input on a context of the test's own.
        alone_context = EmbeddingContext(llama_model, pooling="last", n_ubatch=64, n_seq_max=2, n_threads=1)
        try:
            assert float(vectors[3] @ normalized(alone_context.embed([inputs[3]])[0], 2)) > 0.9999
        finally:
            alone_context.close()
        with pytest.raises(InvalidRequest, match="too large to process"):
            engine.submit_embeddings(EmbeddingRequest((random_tokens(llama_model, 65, 0),)), _Waiting())
        with pytest.raises(NotSupported, match="Start it with `--embeddings`"):
            plain.submit_embeddings(EmbeddingRequest(inputs), _Waiting())
    finally:
        engine.close()
        plain.close()


def _embedded_alone(
    model: NativeModel, config: EngineConfig, projector: Projector, pieces: list[npt.NDArray[Any]]
) -> npt.NDArray[np.float32]:
    """``pieces`` embedded on a context of the test's own, made as the engine makes its embedding context (whose
    thread alone decodes on it)."""
    context = embedding_context(model, config, projector)
    try:
        return context.embed_pieces(pieces)
    finally:
        context.close()


def test_an_image_input_is_decoded_in_chunks_and_shares_the_generations_media_cache(
    vl_gguf: Path, mmproj_gguf: Path
) -> None:
    """Embedding a snapshot that a chat already described skips the encoder (the media cache is the engine's)."""
    vl = NativeModel(vl_gguf)
    projector = Projector(str(mmproj_gguf), vl, n_threads=1)
    config = EngineConfig(
        n_ctx=2048, n_slots=1, n_batch=512, n_ubatch=512, n_threads=1, embeddings=True, pooling="mean"
    )
    engine = Engine(vl, config, projector=projector)
    try:
        rng = np.random.default_rng(3)
        image = Media.image(
            np.clip(rng.integers(0, 256, 3) + rng.integers(-24, 25, (480, 640, 3)), 0, 255).astype(np.uint8)
        )
        chat = f"<|im_start|>user\n{projector.marker}Describe it.<|im_end|>\n<|im_start|>assistant\n"
        prompt, spans = prompt_from_chunks(projector.tokenize(chat, [image]))
        run(engine, EngineRequest(prompt_tokens=prompt, media=spans, sampling=GREEDY, max_tokens=2))
        assert (engine.stats.n_media_encodes, engine.stats.n_media_cache_hits) == (1, 0)
        tokens, embed_spans = prompt_from_chunks(projector.tokenize(f"{projector.marker}\n", [image]))
        sink = _Waiting()
        engine.submit_embeddings(EmbeddingRequest((tokens,), media=(embed_spans,)), sink)
        vector = sink.result().vectors[0]
        assert (engine.stats.n_media_encodes, engine.stats.n_media_cache_hits) == (1, 1)
        with pytest.raises(InvalidRequest, match="media spans do not match"):
            moved = replace(embed_spans[0], start=embed_spans[0].start + 1)
            engine.submit_embeddings(EmbeddingRequest((tokens,), media=((moved,),)), _Waiting())
        engine.close()  # its thread gone, the projector encodes on this one
        pieces = [
            np.asarray(tokens[: embed_spans[0].start], dtype=np.int32),
            projector.encode(embed_spans[0].chunk),
            np.asarray(tokens[embed_spans[0].end :], dtype=np.int32),
        ]
        np.testing.assert_allclose(vector, normalized(_embedded_alone(vl, config, projector, pieces), 2), atol=1e-6)
    finally:
        engine.close()
        projector.close()
        vl.close()


def test_a_cancelled_request_is_dropped_and_the_next_one_answered(llama_model: NativeModel) -> None:
    context = EmbeddingContext(llama_model, pooling="mean", n_ubatch=16, n_seq_max=1, n_threads=1)
    try:
        queue = EmbeddingQueue(context)
        gone, next_one = _Waiting(), _Waiting()
        queue.add(EmbeddingRequest(tuple(random_tokens(llama_model, 4, seed=i) for i in range(10))), gone)
        queue.add(EmbeddingRequest((random_tokens(llama_model, 4, seed=99),)), next_one)
        queue.run_one()  # one of the ten groups
        queue.cancel(gone)
        while queue.pending:
            queue.run_one()
        assert queue.n_decodes == 2 and not gone.done.is_set()
        assert len(next_one.result().vectors) == 1
    finally:
        context.close()


def test_the_engine_cancels_an_embedding_request(llama_model: NativeModel) -> None:
    config = EngineConfig(n_ctx=512, n_slots=1, n_batch=16, n_ubatch=16, n_threads=1, embeddings=True, pooling="mean")
    engine = Engine(llama_model, config)
    try:
        assert engine.embeddings is not None
        gone = _Waiting()
        engine.submit_embeddings(
            EmbeddingRequest(tuple(random_tokens(llama_model, 15, seed=i) for i in range(2000))), gone
        )
        engine.cancel_embeddings(gone)
        after = _Waiting()
        engine.submit_embeddings(EmbeddingRequest((random_tokens(llama_model, 4, seed=1),)), after)
        after.result()
        assert not gone.done.is_set() and engine.embeddings.n_decodes < 2000
    finally:
        engine.close()


def test_an_image_to_embed_while_streams_run_is_encoded_beside_them(vl_gguf: Path, mmproj_gguf: Path) -> None:
    vl = NativeModel(vl_gguf)
    projector = Projector(str(mmproj_gguf), vl, n_threads=2, side_threads=1)
    config = EngineConfig(
        n_ctx=2048, n_slots=2, n_batch=512, n_ubatch=512, n_threads=2, embeddings=True, pooling="mean"
    )
    engine = Engine(vl, config, projector=projector)
    encode = projector.encode
    entered, release = hold_encodes_beside(projector)
    try:
        image = Media.image(tinted_pixels(640, 480, seed=5))
        tokens, spans = prompt_from_chunks(projector.tokenize(f"{projector.marker}\n", [image]))
        story = EngineRequest(prompt_tokens=prompt(vl, "Tell a story"), sampling=GREEDY, max_tokens=30)
        stream_done: list[list[int]] = []
        runner = threading.Thread(target=lambda: stream_done.append(tokens_of(run(engine, story))))
        runner.start()
        while not engine.slots[0].busy and not engine.slots[1].busy:
            pass
        sink = _Waiting()
        engine.submit_embeddings(EmbeddingRequest((tokens,), media=(spans,)), sink)
        assert entered.wait(30)  # encoded beside the running stream, and held there
        runner.join(30)
        assert len(stream_done) == 1 and not sink.done.is_set()  # the stream finished while the encode was held
        release.set()  # the engine sleeps until the encode wakes it
        vector = sink.result().vectors[0]
        assert engine.embeddings is not None and engine.stats.n_media_encodes == 1
        engine.close()  # its thread gone, the projector encodes on this one
        pieces = [
            np.asarray(tokens[: spans[0].start], dtype=np.int32),
            encode(spans[0].chunk),
            np.asarray(tokens[spans[0].end :], dtype=np.int32),
        ]
        np.testing.assert_allclose(vector, normalized(_embedded_alone(vl, config, projector, pieces), 2), atol=1e-6)
    finally:
        release.set()
        engine.close()
        projector.close()
        vl.close()
