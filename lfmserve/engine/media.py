"""Media in prompts: chunks as positions the prompt cache can compare, and the encoder with its cache.

A media chunk takes positions in a sequence like text does, but its input is a projector's embedding
rows. In ``EngineRequest.prompt_tokens`` those positions hold ids derived from the chunk's content hash
(negative, so never a vocabulary id): the prompt cache, slot choice and checkpoints then treat the same
image as the same run of "tokens", and a different image as a divergence at its first position.

The encoder keeps each chunk's embedding rows in an LRU bounded in bytes (``--media-cache``), so the same
image in another prompt (a new conversation about the same snapshot, another slot) skips the projector,
the part that costs seconds of CPU for a real one. llama-server encodes again.

While other generations run, a chunk is encoded beside them: on a worker thread, with the projector's
second context (its own threads), while the engine keeps decoding with the cores that are left. The
streams slow down by those cores instead of stopping for seconds, as they do in llama-server.

Example::

    prompt, spans = prompt_from_chunks(projector.tokenize(text, media))
    encoder = MediaEncoder(projector, max_bytes=256 * 2**20, stats=stats)
    rows = encoder.cached(spans[0])  # None: not kept
    rows = encoder.encode(spans[0])  # the projector's output, kept from now on
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from ..llama.mtmd import Projector, PromptChunk
from ..llama.owner import name_os_thread
from .records import EngineStats, MediaSpan

#: Media ids are negative int32 (llama.cpp saves slot tokens as int32): -1 .. -(2**31 - 1).
_ID_RANGE = 2**31 - 1


def media_token_ids(key: str, n_tokens: int) -> npt.NDArray[np.int64]:
    """The ids a media chunk's positions hold in a prompt: consecutive from a base its key hashes to.

    Two different chunks share their first id with probability 2**-31; the cache would then reuse one
    position of the wrong image, which no other mismatch allows.
    """
    base = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little") % _ID_RANGE
    return -1 - (base + np.arange(n_tokens, dtype=np.int64)) % _ID_RANGE


def prompt_from_chunks(chunks: Sequence[PromptChunk]) -> tuple[tuple[int, ...], tuple[MediaSpan, ...]]:
    """A tokenized multimodal prompt as the engine takes it: every position's id, and the media spans.

    The tiles of one image share its id; each gets its index in the image as part of its key.
    """
    tokens: list[int] = []
    spans: list[MediaSpan] = []
    tile = 0
    previous_id: str | None = None
    for chunk in chunks:
        if chunk.kind == "text":
            tokens.extend(chunk.tokens)
            continue
        tile = tile + 1 if chunk.id == previous_id else 0
        previous_id = chunk.id
        key = f"{chunk.kind}:{chunk.id}:{tile}:{chunk.n_tokens}"
        spans.append(MediaSpan(len(tokens), chunk.n_tokens, key, chunk))
        tokens.extend(media_token_ids(key, chunk.n_tokens).tolist())
    return tuple(tokens), tuple(spans)


def media_ends(spans: Sequence[MediaSpan]) -> list[int]:
    """Where each media item's chunks end (an image's last tile or thumbnail; the tiles share a content id)."""
    return [span.end for i, span in enumerate(spans) if i + 1 == len(spans) or _item(spans[i + 1]) != _item(span)]


def _item(span: MediaSpan) -> str:
    return span.key.rsplit(":", 2)[0]


def spans_match_prompt(prompt: Sequence[int], spans: Sequence[MediaSpan]) -> bool:
    """Whether the spans are in order, inside the prompt, and their positions hold their ids."""
    end = 0
    for span in spans:
        if span.start < end or span.n_tokens < 1 or span.end > len(prompt):
            return False
        held = np.asarray(prompt[span.start : span.end], dtype=np.int64)
        if not np.array_equal(held, media_token_ids(span.key, span.n_tokens)):
            return False
        end = span.end
    return True


Rows = npt.NDArray[np.float32]


class MediaEncoder:
    """A projector's embeddings for media chunks, the most recently used kept up to ``max_bytes``.

    Used from the engine thread only; ``wake`` is called (from the worker) when an encode beside finishes.
    """

    def __init__(
        self, projector: Projector, *, max_bytes: int, stats: EngineStats, wake: Callable[[], None] = lambda: None
    ) -> None:
        self.projector = projector
        self.max_bytes = max_bytes
        self._stats = stats
        self._wake = wake
        self._rows: OrderedDict[str, Rows] = OrderedDict()
        self.n_bytes = 0
        self._worker = (
            ThreadPoolExecutor(
                1, thread_name_prefix="lfmserve-encode", initializer=name_os_thread, initargs=("lfmserve-encode",)
            )
            if projector.side_threads > 0
            else None
        )
        #: Encodes started beside the engine, by span key, until their rows are taken.
        self._beside: dict[str, Future[tuple[Rows, float]]] = {}

    @property
    def can_encode_beside(self) -> bool:
        return self._worker is not None

    def started_beside(self, span: MediaSpan) -> bool:
        return span.key in self._beside

    @property
    def encoding_beside(self) -> bool:
        """Whether an encode beside is running (the engine then decodes with fewer threads)."""
        return any(not future.done() for future in self._beside.values())

    def cached(self, span: MediaSpan) -> Rows | None:
        """The span's rows if they are kept (a cache hit, marked as just used), else None."""
        rows = self._rows.get(span.key)
        if rows is not None:
            self._rows.move_to_end(span.key)
            self._stats.n_media_cache_hits += 1
        return rows

    def encode(self, span: MediaSpan) -> Rows:
        """The span's embedding rows from the projector (then kept), on this thread with all its threads."""
        rows, seconds = self._timed(span, beside=False)
        self._encoded(span.key, rows, seconds)
        return rows

    def encode_beside(self, span: MediaSpan) -> Rows | None:
        """The span's rows from an encode beside the engine: None while it runs (it starts on the first call).

        An encode that failed raises its :class:`EngineError` here, once.
        """
        assert self._worker is not None, "no second projector context"
        future = self._beside.get(span.key)
        if future is None:
            self._take_orphans()
            future = self._worker.submit(self._timed, span, beside=True)
            future.add_done_callback(lambda _: self._wake())
            self._beside[span.key] = future
        if not future.done():
            return None
        del self._beside[span.key]
        rows, seconds = future.result()
        self._encoded(span.key, rows, seconds)
        return rows

    def close(self) -> None:
        """Wait for an encode beside to finish (the projector must outlive it)."""
        if self._worker is not None:
            self._worker.shutdown(wait=True, cancel_futures=True)

    def _take_orphans(self) -> None:
        """Keep the rows of encodes whose requests went away before taking them (cancelled, failed)."""
        for key, future in list(self._beside.items()):
            if future.done():
                del self._beside[key]
                if future.exception() is None:
                    self._encoded(key, *future.result())

    def _timed(self, span: MediaSpan, *, beside: bool) -> tuple[Rows, float]:
        t0 = time.perf_counter()
        rows = self.projector.encode(span.chunk, beside=beside)
        return rows, time.perf_counter() - t0

    def _encoded(self, key: str, rows: Rows, seconds: float) -> None:
        self._stats.media_encode_seconds += seconds
        self._stats.n_media_encodes += 1
        self._keep(key, rows)

    @property
    def n_entries(self) -> int:
        return len(self._rows)

    def _keep(self, key: str, rows: Rows) -> None:
        if rows.nbytes > self.max_bytes or key in self._rows:
            return
        self._rows[key] = rows
        self.n_bytes += rows.nbytes
        while self.n_bytes > self.max_bytes:
            _, evicted = self._rows.popitem(last=False)
            self.n_bytes -= evicted.nbytes
