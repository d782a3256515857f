"""A multimodal projector (mmproj) through llama.cpp's mtmd: what media it reads, how a prompt with media
becomes chunks, and each media chunk's embeddings.

Only decoded media reach mtmd: RGB pixels or mono float samples at the projector's rate, already
checked by the caller (several of mtmd's failures abort the process instead of returning); a video as its
frames, each an image, between the texts llama-server puts around them (mtmd-helper's video reader is not
used: it runs ffmpeg with no time or size bound, and :mod:`lfmserve.media.video` gives the same frames). A media chunk
is identified by the id the caller gave its media (a content hash), which is what the prompt cache keys
media by.

Example::

    projector = Projector(path, model, n_threads=2)
    chunks = projector.tokenize(f"<|im_start|>user\\n{projector.marker}Describe this.", [Media.image(pixels)])
    embeddings = projector.encode(chunks[1])  # (n_tokens, n_embd) float32
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import llama_cpp.llama_cpp as llama
import llama_cpp.mtmd_cpp as mtmd
import numpy as np
import numpy.typing as npt

from ..errors import EngineError
from .backend import captured_errors, failure_reason, forward_log
from .devices import device_handle
from .model import NativeModel
from .owner import ComputeOwner

logger = logging.getLogger(__name__)

MediaKind = Literal["image", "audio", "video"]
_KINDS: dict[int, Literal["text", "image", "audio"]] = {
    mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT: "text",
    mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE: "image",
    mtmd.MTMD_INPUT_CHUNK_TYPE_AUDIO: "audio",
}


@dataclass(frozen=True, slots=True)
class Media:
    """Decoded media: ``(height, width, 3)`` uint8 RGB pixels, mono float32 samples at the projector's rate, or a
    video's ``(n_frames, height, width, 3)`` frames with its :attr:`layout`.

    ``id`` is the SHA-256 of the decoded data (the same picture sent as PNG or JPEG-from-PNG is the same id).
    """

    kind: MediaKind
    data: npt.NDArray[Any]
    id: str
    #: A video's place in the prompt, in order: texts (tokenized on their own) and frame numbers (each an image).
    layout: tuple[str | int, ...] = ()

    @classmethod
    def image(cls, pixels: npt.NDArray[np.uint8]) -> Media:
        rgb = np.ascontiguousarray(pixels, dtype=np.uint8)
        if rgb.ndim != 3 or rgb.shape[2] != 3 or min(rgb.shape[:2]) < 1:
            raise ValueError(f"an image is (height, width, 3) uint8 pixels, not {rgb.shape}")
        return cls("image", rgb, _content_id(b"image", rgb))

    @classmethod
    def audio(cls, samples: npt.NDArray[np.float32]) -> Media:
        mono = np.ascontiguousarray(samples, dtype=np.float32)
        if mono.ndim != 1 or mono.size == 0:
            raise ValueError(f"audio is non-empty mono float32 samples, not shape {mono.shape}")
        return cls("audio", mono, _content_id(b"audio", mono))

    @classmethod
    def video(cls, frames: npt.NDArray[np.uint8], layout: Sequence[str | int]) -> Media:
        """A video as llama-server's mtmd helper reads it: its frames, and the texts and frame numbers in prompt
        order (``("Video:", 0, "[0m0.00s]", 1, 2)``, from :func:`lfmserve.media.video.video_layout`)."""
        rgb = np.ascontiguousarray(frames, dtype=np.uint8)
        if rgb.ndim != 4 or rgb.shape[3] != 3 or min(rgb.shape[:3]) < 1:
            raise ValueError(f"a video is (n_frames, height, width, 3) uint8 frames, not {rgb.shape}")
        numbers = [item for item in layout if not isinstance(item, str)]
        if numbers != list(range(len(rgb))):
            raise ValueError(f"a video's layout names each of its {len(rgb)} frames once, in order")
        digest = hashlib.sha256("\0".join(str(item) for item in layout).encode())
        digest.update(_content_id(b"video", rgb).encode())
        return cls("video", rgb, digest.hexdigest(), tuple(layout))


def _content_id(kind: bytes, data: npt.NDArray[Any]) -> str:
    digest = hashlib.sha256(kind)
    digest.update(str(data.shape).encode())
    digest.update(data.tobytes())
    return digest.hexdigest()


@dataclass(eq=False)
class PromptChunk:
    """A run of a tokenized prompt: text tokens, or one media item's (part of it, for a tiled image)."""

    kind: Literal["text", "image", "audio"]
    #: The text tokens (empty for media).
    tokens: tuple[int, ...]
    #: Positions the chunk takes in the sequence (the embeddings' row count, for media).
    n_tokens: int
    #: The media's id, shared by the tiles of one image (None for text).
    id: str | None
    #: mtmd decodes the chunk's rows with causal attention off (``mtmd_decode_use_non_causal``: Gemma 3's images).
    non_causal: bool = False
    _handle: Any = field(default=None, repr=False)


#: LFM2-VL's wrapper tokens that mtmd looks up in the text vocabulary (a missing one aborts tiled images).
LFM2_VL_TOKENS = ("<|image_start|>", "<|image_end|>", "<|img_thumbnail|>")
#: mtmd's log-mel hop for LFM2-Audio (10 ms at 16 kHz); the encoder needs a position row per 2 frames.
_AUDIO_HOP_SECONDS = 0.01


@dataclass(frozen=True, slots=True)
class ProjectorFile:
    """What a projector GGUF says of itself that mtmd does not report."""

    projector_types: frozenset[str]
    #: None without an audio encoder (or without the table that bounds it).
    max_audio_seconds: float | None


def _open(path: str, model: NativeModel, params: Any, n_threads: int) -> Any:
    """An mtmd context for ``path`` over ``model`` with ``n_threads`` encoder threads."""
    params.n_threads = n_threads
    with captured_errors() as errors:
        ctx = mtmd.mtmd_init_from_file(path.encode(), model.handle, params)
    if not ctx:
        raise EngineError(f"failed to load the multimodal projector {path}: {failure_reason(errors)}")
    return ctx


def read_projector_file(path: str) -> ProjectorFile:
    """The projector types and the audio length bound, from the GGUF's metadata and tensor shapes."""
    import gguf  # with a projector only: gguf (and the PyYAML it loads) costs megabytes a text model does not need

    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError) as exc:
        raise EngineError(f"failed to load the multimodal projector {path}: {exc}") from exc
    types = set()
    for key in ("clip.projector_type", "clip.vision.projector_type", "clip.audio.projector_type"):
        field = reader.get_field(key)
        if field is not None:
            types.add(bytes(field.parts[field.data[0]]).decode())
    rows = next((int(t.shape[1]) for t in reader.tensors if t.name == "a.position_embd.weight"), None)
    # mtmd asserts rows >= n_frames / 2, with a frame every 10 ms plus one: a margin of one row.
    seconds = None if rows is None else (2 * rows - 2) * _AUDIO_HOP_SECONDS
    return ProjectorFile(frozenset(types), seconds)


def _expanded(item: Media) -> list[str | tuple[Media, int | None]]:
    """What stands at a media item's marker: the item itself, or a video's texts and frames in layout order."""
    if item.kind != "video":
        return [(item, None)]
    return [entry if isinstance(entry, str) else (item, entry) for entry in item.layout]


class Projector:
    """An mtmd context over a text model; optionally a second one, with fewer threads, to encode beside decoding.

    mtmd fixes an encoder's thread count when it loads. On a machine whose cores the engine's decoding
    uses, a projector that encodes while streams generate needs cores of its own: ``side_threads`` opens a
    second context with that many threads (the projector's weights are then held twice), which the engine
    uses from a worker thread while it decodes with the rest.
    """

    def __init__(
        self,
        path: str,
        model: NativeModel,
        *,
        n_threads: int,
        side_threads: int = 0,
        use_gpu: bool = False,
        device: str | None = None,
        image_min_tokens: int = -1,
        image_max_tokens: int = -1,
        media_marker: str | None = None,
        warmup: bool = True,
    ) -> None:
        """``warmup``: mtmd encodes a blank image (and audio) once at load, as llama-server's ``--warmup`` has it."""
        facts = read_projector_file(path)
        params = mtmd.mtmd_context_params_default()
        if media_marker is not None:
            self._marker_bytes = media_marker.encode()  # kept alive: mtmd holds the pointer
            params.media_marker = self._marker_bytes
        params.use_gpu = use_gpu
        params.device = device_handle(device, "-mmdev") if use_gpu and device else None  # None: the first GPU
        params.print_timings = False
        params.image_min_tokens = image_min_tokens
        params.image_max_tokens = image_max_tokens
        params.warmup = warmup
        mtmd.mtmd_log_set(forward_log, None)
        self.path = path
        self._side_ctx: Any = None
        self._ctx = _open(path, model, params, n_threads)
        #: Tokenizing (a request's worker thread) and encoding (the engine thread) share the context.
        self._lock = threading.Lock()
        self._side_lock = threading.Lock()
        #: The threads that encode on each context (:mod:`.owner`): the engine's, and its encoder's beside it.
        self._owner = ComputeOwner("the projector's context")
        self._side_owner = ComputeOwner("the projector's second context")
        self.n_embd = model.info.n_embd
        self.vision = bool(mtmd.mtmd_support_vision(self._ctx))
        self.audio = bool(mtmd.mtmd_support_audio(self._ctx))
        #: Samples per second the audio must be at (-1 without an audio encoder).
        self.sample_rate = int(mtmd.mtmd_get_audio_sample_rate(self._ctx))
        marker = mtmd.mtmd_get_marker(self._ctx)
        #: The text that stands for one media item in a prompt.
        self.marker = (marker or mtmd.mtmd_default_marker()).decode()
        #: The projector types the file holds (``lfm2``, ``lfm2a``, ...).
        self.projector_types = facts.projector_types
        #: The longest audio the encoder takes: mtmd aborts the process beyond it (LFM2-Audio's position rows).
        self.max_audio_seconds = facts.max_audio_seconds
        #: mtmd decodes this projector's image rows with causal attention off (Gemma 3's); audio rows never are.
        self.non_causal_images = bool(mtmd.mtmd_decode_use_non_causal(self._ctx, None))
        #: Threads of the first context, and of the second (0: there is none, every encode uses the first).
        self.n_threads, self.side_threads = n_threads, side_threads
        try:
            self._check_model(model)
            if side_threads > 0:
                self._side_ctx = _open(path, model, params, side_threads)
        except EngineError:
            self.close()
            raise

    def _check_model(self, model: NativeModel) -> None:
        """Refuse pairings that would fail later, at a request, or abort the process (see docs/testing.md)."""
        if mtmd.mtmd_decode_use_mrope(self._ctx):
            raise EngineError(
                f"{self.path} needs M-RoPE positions for its media, which lfmserve does not decode yet "
                "(it supports projectors whose media take consecutive positions, as LFM2-VL's and LFM2-Audio's)"
            )
        if "lfm2" in self.projector_types:
            missing = [t for t in LFM2_VL_TOKENS if model.token_for(t) is None]
            if missing:
                raise EngineError(
                    f"{self.path} is an LFM2-VL projector, but the text model's vocabulary lacks {', '.join(missing)} "
                    "(mtmd would abort on the first large image): pair it with the LFM2-VL model it was made for"
                )

    @property
    def handle(self) -> Any:
        """The ``mtmd_context`` (for llama.cpp's own helpers, as in the tests' reference decoding)."""
        return self._ctx

    @property
    def video(self) -> bool:
        """Whether the projector reads video: any vision projector does, frame by frame (as llama-server's
        ``mtmd_helper_support_video`` says for a build with video, as the pinned wheel is)."""
        return self.vision

    def tokenize(
        self, text: str, media: Sequence[Media], *, add_special: bool = True, parse_special: bool = True
    ) -> list[PromptChunk]:
        """The prompt as chunks; ``text`` holds one :attr:`marker` per item of ``media``, in order.

        A video's layout takes its marker's place: each text of it tokenized on its own (``parse_special`` as the
        prompt's), each frame an image, as mtmd expands llama-server's lazy video bitmap.
        """
        n_markers = text.count(self.marker)
        if n_markers != len(media):
            raise ValueError(f"{n_markers} media markers in the prompt for {len(media)} media items")
        for item in media:
            if not (self.audio if item.kind == "audio" else self.vision):
                raise ValueError(f"this projector does not read {item.kind}")
        with self._lock:
            return self._tokenize(text, media, add_special=add_special, parse_special=parse_special)

    def _tokenize(
        self, text: str, media: Sequence[Media], *, add_special: bool, parse_special: bool
    ) -> list[PromptChunk]:
        pieces = text.split(self.marker)
        texts: list[Any] = []  # the mtmd_input_text structs (and their bytes) the parts point at, kept alive
        parts: list[Any] = []
        bitmaps: list[Any] = []

        def add_text(piece: str) -> None:
            raw = piece.encode()
            texts.append(
                mtmd.mtmd_input_text(text=raw, text_len=len(raw), add_special=False, parse_special=parse_special)
            )
            parts.append(mtmd.mtmd_input_part(text=ctypes.pointer(texts[-1]), bitmap=None))

        def add_bitmap(bitmap: Any) -> None:
            bitmaps.append(bitmap)
            parts.append(mtmd.mtmd_input_part(text=None, bitmap=bitmap))

        chunks = mtmd.mtmd_input_chunks_init()
        try:
            for i, piece in enumerate(pieces):
                if piece:
                    add_text(piece)
                if i < len(media):
                    for item in _expanded(media[i]):
                        if isinstance(item, str):
                            add_text(item)
                        else:
                            add_bitmap(self._bitmap(*item))
            array = (ctypes.POINTER(mtmd.mtmd_input_part) * len(parts))(*(ctypes.pointer(p) for p in parts))
            rc = mtmd.mtmd_tokenize_from_parts(self._ctx, chunks, array, len(parts), add_special)
            if rc != 0:
                raise EngineError(f"mtmd could not tokenize the prompt (code {rc})")
            return [
                self._own(mtmd.mtmd_input_chunks_get(chunks, i)) for i in range(mtmd.mtmd_input_chunks_size(chunks))
            ]
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            for bitmap in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)

    def encode(self, chunk: PromptChunk, *, beside: bool = False) -> npt.NDArray[np.float32]:
        """The embeddings of a media chunk, ``(n_tokens, n_embd)``: seconds of CPU for a real projector's image.

        ``beside`` encodes with the second context (:attr:`side_threads` threads); both give the same rows.
        """
        if chunk.kind == "text" or chunk._handle is None:
            raise ValueError("only media chunks are encoded")
        if beside and not self._side_ctx:
            raise ValueError("this projector has no second context (side_threads=0)")
        ctx, lock = (self._side_ctx, self._side_lock) if beside else (self._ctx, self._lock)
        (self._side_owner if beside else self._owner).check()
        with lock:
            if mtmd.mtmd_encode_chunk(ctx, chunk._handle) != 0:
                raise EngineError(f"mtmd could not encode the {chunk.kind}")
            output = mtmd.mtmd_get_output_embd(ctx)
            rows = np.ctypeslib.as_array(output, shape=(chunk.n_tokens * self.n_embd,))
            return rows.reshape(chunk.n_tokens, self.n_embd).copy()

    def close(self) -> None:
        for name in ("_side_ctx", "_ctx"):
            ctx = getattr(self, name)
            if ctx:
                mtmd.mtmd_free(ctx)
                setattr(self, name, None)

    def _bitmap(self, item: Media, frame: int | None = None) -> Any:
        """An mtmd bitmap of an image, audio, or one frame of a video (mergeable, as mtmd-helper makes a video's
        frames). A frame carries the video's id, as an image's tiles share theirs: the prompt cache then takes
        the video as one item (checkpointed after its last frame, not after each)."""
        if item.kind == "audio":
            samples = item.data.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            bitmap = mtmd.mtmd_bitmap_init_from_audio(item.data.size, samples)
        else:
            pixels_array = item.data if frame is None else item.data[frame]
            height, width, _ = pixels_array.shape
            pixels = pixels_array.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
            bitmap = mtmd.mtmd_bitmap_init(width, height, pixels)
        if not bitmap:
            raise EngineError(f"mtmd could not take the {item.kind}")
        mtmd.mtmd_bitmap_set_id(bitmap, item.id.encode())
        if frame is not None:
            mtmd.mtmd_bitmap_set_mergeable(bitmap, True)
        return bitmap

    def _own(self, borrowed: Any) -> PromptChunk:
        """A chunk of ours, copied out of mtmd's list (freed when the chunk is)."""
        kind = _KINDS[mtmd.mtmd_input_chunk_get_type(borrowed)]
        if kind == "text":
            count = ctypes.c_size_t(0)
            pointer = mtmd.mtmd_input_chunk_get_tokens_text(borrowed, ctypes.byref(count))
            tokens = tuple(pointer[: count.value])
            return PromptChunk("text", tokens, len(tokens), None)
        handle = mtmd.mtmd_input_chunk_copy(borrowed)
        raw_id = mtmd.mtmd_input_chunk_get_id(handle)
        chunk = PromptChunk(
            kind,
            (),
            int(mtmd.mtmd_input_chunk_get_n_tokens(handle)),
            raw_id.decode() if raw_id else None,
            non_causal=bool(mtmd.mtmd_decode_use_non_causal(self._ctx, handle)),
        )
        chunk._handle = handle
        weakref.finalize(chunk, mtmd.mtmd_input_chunk_free, handle)
        return chunk


@contextmanager
def attention(ctx: Any, *, non_causal: bool) -> Iterator[None]:
    """mtmd-helper's ``scope_non_causal`` around a batch of media rows: causal attention off on the llama
    context ``ctx`` while the batch decodes when ``non_causal`` (:attr:`PromptChunk.non_causal`), then back.

    Example::

        with attention(ctx.handle, non_causal=span.chunk.non_causal):
            ctx.decode(rows_batch)
    """
    if not non_causal:
        yield
        return
    causal = bool(llama.llama_get_causal_attn(ctx))  # mtmd turns it back on; a non-causal model stays so
    llama.llama_set_causal_attn(ctx, False)
    try:
        yield
    finally:
        llama.llama_set_causal_attn(ctx, causal)
