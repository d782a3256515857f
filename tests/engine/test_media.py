"""Media in the engine: prompts with images and audio give llama.cpp's own tokens (mtmd's helper is the
reference), alone, batched with text streams, across turns, and from the media cache."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import llama_cpp.llama_cpp as llama
import llama_cpp.mtmd_cpp as mtmd
import numpy as np
import pytest

from lfmserve.engine.core import Engine
from lfmserve.engine.media import MediaEncoder, media_ends, media_token_ids, prompt_from_chunks, spans_match_prompt
from lfmserve.engine.records import EngineConfig, EngineOutput, EngineRequest, EngineStats, MediaSpan
from lfmserve.engine.stream import SyncStream
from lfmserve.errors import InvalidRequest
from lfmserve.llama.model import NativeModel
from lfmserve.llama.mtmd import Media, Projector
from tests.engine.conftest import GREEDY, hold_encodes_beside, run, tokens_of

N_TOKENS = 12


@pytest.fixture(scope="module")
def vl_model(vl_gguf: Path) -> Iterator[NativeModel]:
    m = NativeModel(vl_gguf)
    yield m
    m.close()


@pytest.fixture(scope="module")
def projector(vl_model: NativeModel, mmproj_gguf: Path) -> Iterator[Projector]:
    p = Projector(str(mmproj_gguf), vl_model, n_threads=1)
    yield p
    p.close()


#: The projectors of the module's engines, closed after them.
_ENGINES_PROJECTORS: list[Projector] = []


@pytest.fixture(scope="module", autouse=True)
def _close_engines_projectors() -> Iterator[None]:
    yield
    while _ENGINES_PROJECTORS:
        _ENGINES_PROJECTORS.pop().close()


def _own(model: NativeModel, projector: Projector) -> Projector:
    """A projector like ``projector``, for one engine: a projector's context encodes on the thread of one running
    engine only, and these tests run several engines at once."""
    own = Projector(projector.path, model, n_threads=projector.n_threads, side_threads=projector.side_threads)
    _ENGINES_PROJECTORS.append(own)
    return own


def _engine(model: NativeModel, projector: Projector, **config: int) -> Engine:
    options = {"n_ctx": 8192, "n_slots": 4, "n_batch": 512, "n_ubatch": 512, "n_threads": 1, **config}
    return Engine(model, EngineConfig(**options), projector=projector)


@pytest.fixture(scope="module")
def engine(vl_model: NativeModel, projector: Projector) -> Iterator[Engine]:
    e = _engine(vl_model, _own(vl_model, projector))
    yield e
    e.close()


def _image(width: int, height: int, seed: int = 0) -> Media:
    """A picture of one tint (the seed's) with noise: the tiny random model's answer follows the tint."""
    rng = np.random.default_rng(seed)
    tint = rng.integers(0, 256, 3)
    return Media.image(np.clip(tint + rng.integers(-24, 25, (height, width, 3)), 0, 255).astype(np.uint8))


def _tone(seconds: float, hz: float = 440.0) -> Media:
    t = np.arange(int(16000 * seconds)) / 16000
    return Media.audio((0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32))


def _chat(projector: Projector, question: str, n_media: int = 1, system: str = "") -> str:
    head = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    return f"{head}<|im_start|>user\n{projector.marker * n_media}{question}<|im_end|>\n<|im_start|>assistant\n"


def _request(projector: Projector, text: str, media: list[Media], **options: object) -> EngineRequest:
    prompt, spans = prompt_from_chunks(projector.tokenize(text, media))
    return EngineRequest(prompt_tokens=prompt, media=spans, sampling=GREEDY, max_tokens=N_TOKENS, **options)  # type: ignore[arg-type]


def _reference(model: NativeModel, projector: Projector, text: str, media: list[Media], n: int) -> list[int]:
    """Greedy tokens as llama.cpp's own ``mtmd_helper_eval_chunks`` prefills the prompt, in a fresh context."""
    params = llama.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 8192, 512, 512
    params.n_threads = params.n_threads_batch = 1
    ctx = llama.llama_init_from_model(model.handle, params)
    chunks = mtmd.mtmd_input_chunks_init()
    bitmaps = []
    for item in media:
        if item.kind == "image":
            height, width, _ = item.data.shape
            bitmap = mtmd.mtmd_bitmap_init(width, height, item.data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)))
        else:
            bitmap = mtmd.mtmd_bitmap_init_from_audio(
                item.data.size, item.data.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            )
        bitmaps.append(bitmap)
    batch = llama.llama_batch_init(1, 0, 1)
    try:
        raw = text.encode()
        prompt = mtmd.mtmd_input_text(text=raw, text_len=len(raw), add_special=True, parse_special=True)
        array = (mtmd.mtmd_bitmap_p_ctypes * len(bitmaps))(*bitmaps)
        assert mtmd.mtmd_tokenize(projector.handle, chunks, ctypes.byref(prompt), array, len(bitmaps)) == 0
        n_past = llama.llama_pos(0)
        assert mtmd.mtmd_helper_eval_chunks(projector.handle, ctx, chunks, 0, 0, 512, True, ctypes.byref(n_past)) == 0
        tokens = []
        for _ in range(n):
            logits = np.ctypeslib.as_array(llama.llama_get_logits_ith(ctx, -1), shape=(model.n_vocab,))
            tokens.append(int(np.argmax(logits)))
            batch.n_tokens = 1
            batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.logits[0] = tokens[-1], n_past.value, 1, 1
            batch.seq_id[0][0] = 0
            assert llama.llama_decode(ctx, batch) == 0
            n_past.value += 1
        return tokens
    finally:
        llama.llama_batch_free(batch)
        mtmd.mtmd_input_chunks_free(chunks)
        for bitmap in bitmaps:
            mtmd.mtmd_bitmap_free(bitmap)
        llama.llama_free(ctx)


# -- positions -----------------------------------------------------------------------------------------


def test_media_positions_are_negative_int32_ids_fixed_by_the_key() -> None:
    ids = media_token_ids("image:abc:0:64", 64)
    assert ids.tolist() == media_token_ids("image:abc:0:64", 64).tolist()
    assert len(set(ids.tolist())) == 64 and ids.max() < 0 and ids.min() >= -(2**31 - 1)
    assert media_token_ids("image:abd:0:64", 64)[0] != ids[0]


def test_a_tiled_image_is_spans_with_one_key_per_tile(projector: Projector) -> None:
    image = _image(1024, 768)
    prompt, spans = prompt_from_chunks(projector.tokenize(_chat(projector, "Describe this."), [image]))
    assert [s.n_tokens for s in spans] == [256] * 6 + [234]
    assert [s.key for s in spans] == [f"image:{image.id}:{i}:{n}" for i, n in enumerate([256] * 6 + [234])]
    # BOS <|im_start|> u s er \n <|image_start|> <|img_row_1_col_1|>, then a row/column token before each
    # further tile and <|img_thumbnail|> before the thumbnail
    assert spans[0].start == 8 and [b.start - a.end for a, b in zip(spans, spans[1:], strict=False)] == [1] * 6
    assert len(prompt) == 8 + 1770 + 6 + 23  # after the thumbnail: <|image_end|>Describe this.<|im_end|>...
    assert spans_match_prompt(prompt, spans)
    assert media_ends(spans) == [spans[-1].end]
    shifted = MediaSpan(spans[0].start + 1, spans[0].n_tokens, spans[0].key, None)
    assert not spans_match_prompt(prompt, [shifted])
    assert not spans_match_prompt(prompt, [spans[1], spans[0]])


# -- exact tokens --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "media",
    [[_image(640, 480)], [_image(1024, 768, seed=3)], [_tone(2.0)], [_image(64, 64, seed=5), _tone(1.0, hz=220)]],
    ids=["640x480", "1024x768-tiled", "audio-2s", "image-and-audio"],
)
def test_greedy_tokens_equal_llama_cpps_own_media_prefill(
    engine: Engine, vl_model: NativeModel, projector: Projector, media: list[Media]
) -> None:
    text = _chat(projector, "Describe this.", n_media=len(media))
    out = run(engine, _request(projector, text, media, cache_prompt=False))
    assert tokens_of(out) == _reference(vl_model, projector, text, media, N_TOKENS)
    assert out[-1].n_prompt_tokens == len(prompt_from_chunks(projector.tokenize(text, media))[0])


def test_other_media_give_other_tokens(engine: Engine, projector: Projector) -> None:
    """The equalities in this file compare something: the model's answer does depend on the pixels."""
    text = _chat(projector, "Describe this.")
    a, b, c = (
        tokens_of(run(engine, _request(projector, text, [_image(640, 480, seed=seed)], cache_prompt=False)))
        for seed in (1, 4, 5)
    )
    assert a != b != c != a


def test_an_image_batched_with_three_text_streams_gives_the_same_tokens(
    vl_model: NativeModel, projector: Projector
) -> None:
    # The image's rows take several steps beside the streams.
    engine = _engine(vl_model, _own(vl_model, projector), n_ubatch=128)
    try:
        image = _request(projector, _chat(projector, "What is here?"), [_image(1024, 768, seed=7)])
        texts = [
            EngineRequest(
                prompt_tokens=tuple(vl_model.tokenize_chat(_chat(projector, f"Story {i}", n_media=0))),
                sampling=GREEDY,
                max_tokens=40,
            )
            for i in range(3)
        ]
        alone = [tokens_of(run(engine, r)) for r in [image, *texts]]
        streams = [SyncStream() for _ in range(4)]
        uncached = [replace(r, cache_prompt=False) for r in [*texts, image]]
        for request, stream in zip(uncached, [*streams[1:], streams[0]], strict=True):
            engine.submit(request, stream)
        together = [list(stream) for stream in streams]
        assert [tokens_of(out) for out in together] == alone
        assert together[0][-1].n_cached_tokens == 0  # the image was prefilled again, beside the streams
    finally:
        engine.close()


class _Recording:
    """A sink that keeps every output and says when the request has finished."""

    def __init__(self) -> None:
        self.outputs: list[EngineOutput] = []
        self.finished = threading.Event()

    def put(self, item: EngineOutput | BaseException) -> None:
        assert not isinstance(item, BaseException), item
        self.outputs.append(item)
        if item.finished:
            self.finished.set()


def test_streams_keep_generating_while_an_image_encodes_beside_them(vl_model: NativeModel, mmproj_gguf: Path) -> None:
    """With a second projector context, an image that arrives while streams run is encoded on the encoder's
    thread: the streams go on (here to their end) while the encode is held, and every answer is unchanged."""
    beside = Projector(str(mmproj_gguf), vl_model, n_threads=2, side_threads=1)
    engine = _engine(vl_model, beside, n_threads=2)
    entered, release = hold_encodes_beside(beside)
    try:
        text = _chat(beside, "What is here?")
        image = _image(640, 480, seed=19)
        texts = [
            EngineRequest(
                prompt_tokens=tuple(vl_model.tokenize_chat(_chat(beside, f"Story {i}", n_media=0))),
                sampling=GREEDY,
                max_tokens=30,
                cache_prompt=False,
            )
            for i in range(3)
        ]
        alone = [tokens_of(run(engine, r)) for r in texts]
        sinks = [_Recording() for _ in range(4)]
        for request, sink in zip(texts, sinks[1:], strict=True):
            engine.submit(request, sink)
        assert entered.wait(0) is False
        engine.submit(_request(beside, text, [image], cache_prompt=False), sinks[0])
        assert entered.wait(30)  # the image's encode started beside the streams, and is held there
        for sink in sinks[1:]:
            assert sink.finished.wait(30)  # the streams finished while it was held
        assert not sinks[0].finished.is_set() and engine.stats.n_media_encodes == 0
        release.set()  # the engine, with nothing else to do, sleeps until the encode wakes it
        assert sinks[0].finished.wait(30)
        assert [tokens_of(sink.outputs) for sink in sinks[1:]] == alone
        assert tokens_of(sinks[0].outputs) == _reference(vl_model, beside, text, [image], N_TOKENS)
        assert engine.stats.n_media_encodes == 1
    finally:
        release.set()
        engine.close()
        beside.close()


def test_turn_two_reuses_the_image_and_gives_the_tokens_of_a_fresh_prefill(
    vl_model: NativeModel, projector: Projector
) -> None:
    engine = _engine(vl_model, _own(vl_model, projector))
    fresh = _engine(vl_model, _own(vl_model, projector), media_cache_bytes=0)
    try:
        image = _image(1024, 768, seed=11)
        first_text = _chat(projector, "What is in the picture?")
        first = run(engine, _request(projector, first_text, [image]))
        reply = vl_model.detokenize(tokens_of(first), special=True)
        turn = "<|im_end|>\n<|im_start|>user\nAnd the colours?<|im_end|>\n<|im_start|>assistant\n"
        second_text = f"{first_text}{reply}{turn}"
        encodes = engine.stats.n_media_encodes
        second = run(engine, _request(projector, second_text, [image]))
        assert engine.stats.n_media_encodes == encodes == 7  # turn 2 encodes nothing
        assert second[-1].n_cached_tokens >= len(prompt_from_chunks(projector.tokenize(first_text, [image]))[0]) - 1
        assert tokens_of(second) == tokens_of(run(fresh, _request(projector, second_text, [image], cache_prompt=False)))
    finally:
        engine.close()
        fresh.close()


def test_the_same_image_in_another_prompt_is_not_encoded_again(vl_model: NativeModel, projector: Projector) -> None:
    engine = _engine(vl_model, _own(vl_model, projector))
    uncached = _engine(vl_model, _own(vl_model, projector), media_cache_bytes=0)
    try:
        image = _image(640, 480, seed=13)
        run(engine, _request(projector, _chat(projector, "Describe it.", system="Be brief."), [image]))
        assert (engine.stats.n_media_encodes, engine.stats.n_media_cache_hits) == (1, 0)
        other = _request(projector, _chat(projector, "Any people?", system="You watch a camera."), [image])
        out = run(engine, other)
        assert (engine.stats.n_media_encodes, engine.stats.n_media_cache_hits) == (1, 1)
        assert out[-1].n_cached_tokens < other.media[0].start  # the prompts differ before the image
        assert tokens_of(out) == tokens_of(run(uncached, other))
        assert uncached.stats.n_media_encodes == 1 and uncached.media is not None and uncached.media.n_entries == 0
    finally:
        engine.close()
        uncached.close()


def test_a_second_question_about_the_image_restarts_right_after_it(vl_model: NativeModel, projector: Projector) -> None:
    """A checkpoint after each media item: on a hybrid model, a new question reuses the whole image."""
    engine = _engine(vl_model, _own(vl_model, projector), n_slots=1)
    try:
        image = _image(640, 480, seed=17)
        run(engine, _request(projector, _chat(projector, "Describe it."), [image]))
        second = _request(projector, _chat(projector, "Count the cars."), [image])
        out = run(engine, second)
        assert out[-1].n_cached_tokens == second.media[0].end
        assert engine.stats.n_media_encodes == 1
    finally:
        engine.close()


# -- refusals and the cache's bound --------------------------------------------------------------------


def test_media_requests_need_a_projector_and_matching_spans(
    vl_model: NativeModel, projector: Projector, engine: Engine
) -> None:
    request = _request(projector, _chat(projector, "Hi"), [_image(64, 64)])
    text_only = Engine(vl_model, EngineConfig(n_ctx=2048, n_slots=1, n_threads=1))
    try:
        with pytest.raises(InvalidRequest, match="no multimodal projector"):
            text_only.submit(request, SyncStream())
    finally:
        text_only.close()
    moved = MediaSpan(request.media[0].start - 1, request.media[0].n_tokens, request.media[0].key, None)
    with pytest.raises(InvalidRequest, match="media spans do not match"):
        engine.submit(EngineRequest(prompt_tokens=request.prompt_tokens, media=(moved,)), SyncStream())
    with pytest.raises(InvalidRequest, match=r"Invalid token id -\d+"):  # media ids without their span
        engine.submit(EngineRequest(prompt_tokens=request.prompt_tokens), SyncStream())


class _CountingProjector:
    """Stands in for a projector: rows of a fixed size, and a count of encodes."""

    side_threads = 0

    def __init__(self) -> None:
        self.n_encodes = 0

    def encode(self, chunk: object, *, beside: bool = False) -> np.ndarray:
        self.n_encodes += 1
        return np.zeros((100, 64), dtype=np.float32)  # 25,600 bytes


def test_the_media_cache_keeps_the_most_recently_used_within_its_bytes() -> None:
    fake = _CountingProjector()
    encoder = MediaEncoder(fake, max_bytes=60_000, stats=EngineStats())  # type: ignore[arg-type]
    a, b, c = (MediaSpan(0, 100, key, None) for key in "abc")
    encoder.encode(a)
    encoder.encode(b)
    assert encoder.cached(a) is not None  # a is now the most recent
    encoder.encode(c)  # 3 x 25,600 > 60,000: b, the least recently used, goes
    assert (encoder.n_entries, encoder.n_bytes) == (2, 51_200)
    assert encoder.cached(b) is None and encoder.cached(a) is not None and encoder.cached(c) is not None
    tiny = MediaEncoder(fake, max_bytes=1000, stats=EngineStats())  # type: ignore[arg-type]
    tiny.encode(a)
    assert tiny.n_entries == 0 and fake.n_encodes == 4
