"""A projector through mtmd: prompts with media become chunks with llama-server's token counts, media chunks
encode to embeddings of the text model's width, and each says whether mtmd decodes it with causal attention."""

from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp.llama_cpp as llama
import llama_cpp.mtmd_cpp as mtmd
import numpy as np
import pytest

from lfmserve.engine.media import media_ends, prompt_from_chunks
from lfmserve.errors import EngineError
from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel
from lfmserve.llama.mtmd import Media, Projector, PromptChunk, attention
from lfmserve.media.video import VideoOptions, decode_video
from lfmserve.testing import (
    TinyGemma3,
    TinyGemma3Projector,
    TinyProjector,
    video_bytes,
    write_gemma3_gguf,
    write_gemma3_mmproj_gguf,
    write_mmproj_gguf,
)


def _image(width: int, height: int, seed: int = 0) -> Media:
    return Media.image(np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8))


def _tone(seconds: float) -> Media:
    t = np.arange(int(16000 * seconds)) / 16000
    return Media.audio((0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32))


# Media tokens as llama-server counts them for LFM2-VL's projector (docs/testing.md, "Tiny projector facts").
@pytest.mark.parametrize(
    ("size", "media_chunks"),
    [
        ((64, 64), [64]),  # upscaled to the 64-token minimum
        ((256, 256), [64]),
        ((640, 480), [234]),  # one tile, resized to 576x416: 18 x 13 tokens
        ((512, 512), [256]),
        ((1024, 768), [256] * 6 + [234]),  # 3 x 2 tiles of 512 px, then a thumbnail
    ],
)
def test_images_become_llama_servers_chunks(
    projector: Projector, size: tuple[int, int], media_chunks: list[int]
) -> None:
    chunks = projector.tokenize(f"<|im_start|>user\n{projector.marker}Describe this.<|im_end|>\n", [_image(*size)])
    image = [c for c in chunks if c.kind == "image"]
    assert [c.n_tokens for c in image] == media_chunks
    assert {c.id for c in image} == {_image(*size).id}  # every tile carries the image's content id
    text = [c for c in chunks if c.kind == "text"]
    assert text[0].tokens[:2] == (1, 6) and all(c.n_tokens == len(c.tokens) for c in text)  # BOS, <|im_start|>
    if len(image) > 1:  # the tiles are separated by their row / column tokens, the thumbnail by its own
        assert [c.kind for c in chunks[1:-1]] == ["image", "text"] * 6 + ["image"]


# llama-server with --image-max-tokens 64 / --image-min-tokens 128 and the same files answered prompt_tokens
# 1627 for a 640x480 image (7 chunks, as below, plus the 9 tile tokens and the text) and 174 for a 64x64 one.
@pytest.mark.parametrize(
    ("limits", "size", "media_chunks"),
    [
        ({"image_max_tokens": 64}, (640, 480), [256] * 6 + [54]),  # mtmd then tiles it, thumbnail within 64
        ({"image_min_tokens": 128}, (64, 64), [144]),
    ],
)
def test_image_token_limits_are_mtmds(
    vl_gguf: Path, mmproj_gguf: Path, limits: dict[str, int], size: tuple[int, int], media_chunks: list[int]
) -> None:
    model = NativeModel(vl_gguf)
    limited = Projector(str(mmproj_gguf), model, n_threads=1, **limits)
    try:
        chunks = limited.tokenize(f"{limited.marker}Describe this.", [_image(*size)])
        assert [c.n_tokens for c in chunks if c.kind == "image"] == media_chunks
    finally:
        limited.close()
        model.close()


@pytest.mark.parametrize(("seconds", "n_tokens"), [(1, 13), (3, 38), (10, 126)])
def test_audio_is_one_chunk_of_about_12_5_tokens_a_second(projector: Projector, seconds: float, n_tokens: int) -> None:
    chunks = projector.tokenize(f"{projector.marker}", [_tone(seconds)])
    assert [(c.kind, c.n_tokens) for c in chunks if c.kind != "text"] == [("audio", n_tokens)]


def test_media_chunks_encode_to_rows_of_the_text_models_width(projector: Projector) -> None:
    chunks = projector.tokenize(projector.marker + projector.marker, [_image(640, 480), _tone(1)])
    image, audio = (c for c in chunks if c.kind != "text")
    for chunk, rows in ((image, 234), (audio, 13)):
        embeddings = projector.encode(chunk)
        assert embeddings.shape == (rows, 64) and embeddings.dtype == np.float32 and np.isfinite(embeddings).all()
    assert np.array_equal(projector.encode(image), projector.encode(image))  # deterministic
    with pytest.raises(ValueError, match="only media chunks are encoded"):
        projector.encode(chunks[0])


def test_the_same_pixels_are_the_same_id_and_other_pixels_another() -> None:
    assert _image(64, 64, seed=1).id == _image(64, 64, seed=1).id != _image(64, 64, seed=2).id
    assert _image(64, 32).id != _image(32, 64).id


def test_prompts_and_media_must_agree(projector: Projector, tmp_path: Path, vl_gguf: Path) -> None:
    with pytest.raises(ValueError, match="1 media markers in the prompt for 2 media items"):
        projector.tokenize(projector.marker, [_image(64, 64), _image(64, 64)])
    vision_only = write_mmproj_gguf(tmp_path / "v.gguf", TinyProjector(kind="vision"))
    model = NativeModel(vl_gguf)
    eyes = Projector(str(vision_only), model, n_threads=1)
    try:
        with pytest.raises(ValueError, match="this projector does not read audio"):
            eyes.tokenize(eyes.marker, [_tone(1)])
    finally:
        eyes.close()
        model.close()
    with pytest.raises(ValueError, match=r"an image is \(height, width, 3\) uint8 pixels, not \(4, 4\)"):
        Media.image(np.zeros((4, 4), dtype=np.uint8))


def test_a_projector_for_another_width_is_refused_with_mtmds_reason(tmp_path: Path, vl_gguf: Path) -> None:
    narrow = write_mmproj_gguf(tmp_path / "narrow.gguf", TinyProjector(n_embd_text=32))
    model = NativeModel(vl_gguf)
    try:
        with pytest.raises(EngineError) as info:
            Projector(str(narrow), model, n_threads=1)
        assert str(info.value) == (
            f"failed to load the multimodal projector {narrow}: "
            "mismatch between text model (n_embd = 64) and mmproj (n_embd = 32)"
        )
    finally:
        model.close()


def test_lfm2s_media_decode_causally(projector: Projector) -> None:
    chunks = projector.tokenize(projector.marker + projector.marker, [_image(64, 64), _tone(1)])
    assert not projector.non_causal_images and not any(c.non_causal for c in chunks)


def test_gemma3s_images_decode_with_causal_attention_off(tmp_path: Path) -> None:
    """``mtmd_decode_use_non_causal``: Gemma 3's image chunks, not the text around them."""
    model = NativeModel(write_gemma3_gguf(tmp_path / "gemma3.gguf", TinyGemma3(seed=1)))
    gemma3 = Projector(
        str(write_gemma3_mmproj_gguf(tmp_path / "mmproj.gguf", TinyGemma3Projector())), model, n_threads=1
    )
    try:
        chunks = gemma3.tokenize(f"What is this: {gemma3.marker}\n", [_image(64, 64)])
        assert gemma3.non_causal_images and [(c.kind, c.non_causal) for c in chunks] == [
            ("text", False),
            ("image", True),
            ("text", False),
        ]
    finally:
        gemma3.close()
        model.close()


def test_attention_turns_causal_attention_off_for_the_batch_then_back(vl_gguf: Path) -> None:
    model = NativeModel(vl_gguf)
    ctx = NativeContext(model, n_ctx=64, n_batch=16, n_ubatch=16, n_seq_max=1, n_threads=1, n_threads_batch=1)
    try:
        with attention(ctx.handle, non_causal=False):
            assert llama.llama_get_causal_attn(ctx.handle)
        with attention(ctx.handle, non_causal=True):
            assert not llama.llama_get_causal_attn(ctx.handle)
        assert llama.llama_get_causal_attn(ctx.handle)
        with pytest.raises(RuntimeError), attention(ctx.handle, non_causal=True):
            raise RuntimeError("a failed decode")
        assert llama.llama_get_causal_attn(ctx.handle)  # back on, even then
        llama.llama_set_causal_attn(ctx.handle, False)  # a context that attends both ways stays so
        with attention(ctx.handle, non_causal=True):
            pass
        assert not llama.llama_get_causal_attn(ctx.handle)
    finally:
        ctx.close()
        model.close()


# -- video: llama-server's lazy bitmap, expanded ---------------------------------------------------------


def test_a_videos_layout_must_name_each_frame_once_in_order() -> None:
    frames = np.zeros((2, 4, 4, 3), dtype=np.uint8)
    assert Media.video(frames, ("Video:", 0, "[0m0.00s]", 1)).layout == ("Video:", 0, "[0m0.00s]", 1)
    for layout in (("Video:", 0), ("Video:", 1, 0), ("Video:", 0, 1, 1)):
        with pytest.raises(ValueError, match="names each of its 2 frames once, in order"):
            Media.video(frames, layout)
    with pytest.raises(ValueError, match=r"not \(4, 4, 3\)"):
        Media.video(frames[0], ("Video:", 0))
    same = Media.video(frames, ("Video:", 0, 1))
    assert same.id == Media.video(frames.copy(), ("Video:", 0, 1)).id != Media.video(frames, ("Video:", 0, "x", 1)).id


def _chunk_rows(chunks: list[PromptChunk]) -> list[tuple[str, tuple[int, ...], int]]:
    return [(c.kind, c.tokens, c.n_tokens) for c in chunks]


def _llama_servers_chunks(projector: Projector, text: str, data: bytes) -> list[tuple[str, tuple[int, ...], int]]:
    """llama-server's ``process_mtmd_prompt``: ``mtmd_helper_bitmap_init_from_buf`` (a lazy bitmap that reads the
    video with ffmpeg), then ``mtmd_tokenize`` of the prompt with it."""
    opt = mtmd.mtmd_helper_init_opt_default()
    buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    loaded = mtmd.mtmd_helper_bitmap_init_from_buf_wrapper(projector.handle, buffer, len(data), False, opt)
    assert loaded.bitmap and loaded.video_ctx
    chunks = mtmd.mtmd_input_chunks_init()
    try:
        raw = text.encode()
        prompt = mtmd.mtmd_input_text(text=raw, text_len=len(raw), add_special=True, parse_special=True)
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(loaded.bitmap)
        assert mtmd.mtmd_tokenize(projector.handle, chunks, ctypes.byref(prompt), bitmaps, 1) == 0
        rows = []
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            kind = {0: "text", 1: "image", 2: "audio"}[mtmd.mtmd_input_chunk_get_type(chunk)]
            count = ctypes.c_size_t(0)
            tokens: tuple[int, ...] = ()
            if kind == "text":
                pointer = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(count))
                tokens = tuple(pointer[: count.value])
            rows.append((kind, tokens, int(mtmd.mtmd_input_chunk_get_n_tokens(chunk))))
        return rows
    finally:
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_bitmap_free(loaded.bitmap)
        mtmd.mtmd_helper_video_free(loaded.video_ctx)


@pytest.mark.usefixtures("ffmpeg")
def test_a_video_becomes_llama_servers_chunks(projector: Projector, vl_gguf: Path) -> None:
    data = video_bytes(2.0, 320, 240)
    assert data is not None
    video = decode_video(data, VideoOptions(), param="p")
    text = f"<|im_start|>user\n{projector.marker}Describe this.<|im_end|>\n<|im_start|>assistant\n"
    media = Media.video(video.frames, video.layout)
    chunks = projector.tokenize(text, [media])
    ours = _chunk_rows(chunks)
    assert ours == _llama_servers_chunks(projector, text, data)
    # The frames carry the video's id, as an image's tiles do: 8 spans, each its own key, and one media item.
    assert {c.id for c in chunks if c.kind == "image"} == {media.id}
    _, spans = prompt_from_chunks(chunks)
    assert len({span.key for span in spans}) == 8 and media_ends(spans) == [spans[-1].end]
    # "Video:", then 8 frames of 320x240 (80 tokens each, between <|image_start|> and <|image_end|>), the
    # timestamp after the first; each text tokenized on its own.
    model = NativeModel(vl_gguf, vocab_only=True)
    try:

        def tokens(*pieces: str) -> tuple[int, ...]:
            return tuple(t for p in pieces for t in model.tokenize(p, add_special=False, parse_special=True))

        start, end = "<|image_start|>", "<|image_end|>"
        assert [(kind, n) for kind, _, n in ours] == [
            *[("text", len(ours[0][1])), ("image", 80)],
            *[("text", len(tokens(end, "[0m0.00s]", start))), ("image", 80)],
            *[("text", 2), ("image", 80)] * 6,
            ("text", len(ours[-1][1])),
        ]
        assert ours[0][1] == (model.bos_id, *tokens("<|im_start|>user\n", "Video:", start))
        assert ours[2][1] == tokens(end, "[0m0.00s]", start)
        assert ours[4][1] == tokens(end, start)
        assert ours[-1][1] == tokens(end, "Describe this.<|im_end|>\n<|im_start|>assistant\n")
        assert sum(n for _, _, n in ours) == 1 + len(tokens("<|im_start|>user\n", "Video:")) + 8 * 82 + len(
            tokens("[0m0.00s]", "Describe this.<|im_end|>\n<|im_start|>assistant\n")
        )
    finally:
        model.close()
