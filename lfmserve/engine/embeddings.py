"""Embedding requests on the engine thread: inputs packed into as few decodes as fit, between generation steps.

The engine thread owns both contexts, so embedding decodes never compete with generation for the cores;
it runs one packed decode per loop turn while streams generate (they wait for one micro-batch at most),
and back to back otherwise. Vectors are normalised as llama-server's ``common_embd_normalize`` does.

Example::

    queue = EmbeddingQueue(EmbeddingContext(model, pooling="mean", n_ubatch=512, n_seq_max=64, n_threads=2))
    queue.add(EmbeddingRequest(inputs=((1, 306), (1, 77, 9))), sink)
    while queue.pending:
        queue.run_one()  # sink gets an EmbeddingResult once both inputs are embedded
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..errors import EngineError, InvalidRequest
from ..llama.embedding import EmbeddingContext
from .media import MediaEncoder, spans_match_prompt
from .records import EngineStats, MediaSpan

Vector = npt.NDArray[np.float32]
#: Inputs one request may hold (OpenAI's limit): a request is embedded whole before the next one starts.
MAX_INPUTS = 2048


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    """Token ids of each input; ``normalize`` is llama-server's ``embd_normalize`` (2: Euclidean, -1: none).

    ``media``, if given, has each input's media spans (as a generation's: their positions hold the spans' ids).
    """

    inputs: tuple[tuple[int, ...], ...]
    normalize: int = 2
    media: tuple[tuple[MediaSpan, ...], ...] = ()

    def spans(self, index: int) -> tuple[MediaSpan, ...]:
        return self.media[index] if self.media else ()


@dataclass(frozen=True, slots=True)
class EmbeddingResult:
    """Per input: its pooled, normalised ``(n_embd,)`` vector, or with pooling ``none`` its unnormalised
    ``(n_tokens, n_embd)`` rows; and the tokens embedded in all."""

    vectors: list[Vector]
    n_prompt_tokens: int


class ResultSink(Protocol):
    def put(self, item: EmbeddingResult | BaseException) -> None: ...


def normalized(vector: Vector, norm: int) -> Vector:
    """``vector`` scaled as llama.cpp's ``common_embd_normalize``: -1 none, 0 max-abs to the int16 range,
    2 Euclidean, any other p a p-norm."""
    values = vector.astype(np.float64)
    with np.errstate(all="ignore"):  # a huge p overflows to inf, as in llama.cpp: the vector becomes zeros
        total = _norm_of(values, norm)
    scale = np.float32(1.0 / total) if 0.0 < total < np.inf else np.float32(0.0)
    return (vector * scale).astype(np.float32)


def _norm_of(values: npt.NDArray[np.float64], norm: int) -> float:
    if norm == -1:
        return 1.0
    if norm == 0:
        return float(np.abs(values).max(initial=0.0)) / 32760.0
    if norm == 2:
        return float(np.sqrt(np.sum(values * values)))
    return float(np.sum(np.abs(values) ** float(norm)) ** (1.0 / norm))


def packed(lengths: Sequence[int], max_tokens: int, max_sequences: int) -> list[range]:
    """Consecutive groups of inputs, each within ``max_tokens`` in all and ``max_sequences`` inputs."""
    groups: list[range] = []
    start = total = 0
    for i, n in enumerate(lengths):
        if i > start and (total + n > max_tokens or i - start == max_sequences):
            groups.append(range(start, i))
            start, total = i, 0
        total += n
    if start < len(lengths):
        groups.append(range(start, len(lengths)))
    return groups


@dataclass(slots=True)
class _Job:
    request: EmbeddingRequest
    sink: ResultSink
    groups: collections.deque[range]
    vectors: list[Vector] = field(default_factory=list)


def check_embedding_request(request: EmbeddingRequest, *, n_ubatch: int, n_vocab: int, media: bool) -> None:
    """Refuse what llama-server refuses (with its messages), before anything is queued; a 400 each.

    ``media``: whether inputs may hold media (the engine has a projector).
    """
    if not request.inputs:
        raise InvalidRequest('"input" must not be empty', param="input")
    if len(request.inputs) > MAX_INPUTS:
        raise InvalidRequest(f"at most {MAX_INPUTS} inputs per request (got {len(request.inputs)})", param="input")
    if request.media and (len(request.media) != len(request.inputs) or not media):
        raise InvalidRequest("media inputs need a multimodal projector and a span list per input", param="input")
    for i, tokens in enumerate(request.inputs):
        spans = request.spans(i)
        if spans and not spans_match_prompt(tokens, spans):
            raise InvalidRequest("the media spans do not match the input's media positions", param=f"input.{i}")
        if spans:
            tokens = tuple(t for t in tokens if t >= 0)  # media positions hold the spans' (negative) ids
            if len(tokens) + sum(span.n_tokens for span in spans) != len(request.inputs[i]):
                raise InvalidRequest("an input's negative ids must all be media positions", param=f"input.{i}")
        total = len(request.inputs[i])
        if not total:
            raise InvalidRequest("Input content cannot be empty", param=f"input.{i}")
        if total > n_ubatch:
            raise InvalidRequest(
                f"input ({total} tokens) is too large to process. increase the physical batch size "
                f"(current batch size: {n_ubatch})",
                param=f"input.{i}",
            )
        bad = next((t for t in tokens if not 0 <= t < n_vocab), None)
        if bad is not None:
            raise InvalidRequest(f"Invalid token id {bad} (vocabulary has {n_vocab} tokens)", param=f"input.{i}")


class _EncodingBeside(Exception):
    """A group's media is being encoded beside the engine: the group waits in its queue."""


class EmbeddingQueue:
    """Embedding requests waiting on the engine thread, oldest first, one packed decode at a time."""

    def __init__(
        self,
        context: EmbeddingContext,
        encoder: MediaEncoder | None = None,
        generating: Callable[[], bool] = lambda: False,
        *,
        stats: EngineStats | None = None,
    ) -> None:
        self.context = context
        #: The engine's counters: an input's tokens are prompt tokens decoded, as llama-server counts them.
        self._stats = stats if stats is not None else EngineStats()
        #: The generation's media encoder: media in embedding inputs share its cache of projector output.
        self.encoder = encoder
        #: Whether generations are running: a media item is then encoded beside them, as a chat's is.
        self._generating = generating
        self._jobs: collections.deque[_Job] = collections.deque()
        #: Groups embedded so far: packed inputs, or one input with media (a decode per chunk).
        self.n_decodes = 0

    @property
    def pending(self) -> bool:
        return bool(self._jobs)

    def add(self, request: EmbeddingRequest, sink: ResultSink) -> None:
        """Queue a request: runs of text inputs packed, each input with media alone (its chunks in turn)."""
        groups: list[range] = []
        start = 0
        for i in [*(i for i in range(len(request.inputs)) if request.spans(i)), len(request.inputs)]:
            lengths = [len(tokens) for tokens in request.inputs[start:i]]
            groups += [
                range(start + g.start, start + g.stop)
                for g in packed(lengths, self.context.n_ubatch, self.context.n_seq_max)
            ]
            if i < len(request.inputs):
                groups.append(range(i, i + 1))
            start = i + 1
        self._jobs.append(_Job(request, sink, collections.deque(groups)))

    def run_one(self) -> bool:
        """Embed the next group of the oldest request; deliver the request's result once it is complete.

        False when that group waits for a media encode beside the engine (the encoder's wake ends the wait).
        Any failure is that request's: it is answered with the error and leaves the queue.
        """
        job = self._jobs[0]
        try:
            self._run_group(job)
        except _EncodingBeside:
            return False
        except Exception as exc:
            self._jobs.popleft()
            job.sink.put(exc if isinstance(exc, EngineError) else EngineError(f"embedding failed: {exc}"))
            return True
        if not job.groups:
            self._jobs.popleft()
            n_tokens = sum(len(tokens) for tokens in job.request.inputs)
            job.sink.put(EmbeddingResult(job.vectors, n_tokens))
        return True

    def _run_group(self, job: _Job) -> None:
        group = job.groups[0]
        spans = job.request.spans(group.start)
        # may wait for an encode beside (the group then stays queued)
        pieces = self._pieces(job.request.inputs[group.start], spans) if spans else None
        job.groups.popleft()
        t0 = time.perf_counter()
        if pieces is not None:
            rows = [self.context.embed_pieces(pieces)]
        else:
            rows = self.context.embed([job.request.inputs[i] for i in group])
        self.n_decodes += 1
        self._stats.n_decode_calls += 1
        self._stats.n_prompt_tokens += sum(len(job.request.inputs[i]) for i in group)
        self._stats.prompt_seconds += time.perf_counter() - t0
        pooled = self.context.pooling != "none"
        job.vectors += [normalized(row, job.request.normalize) if pooled else row for row in rows]

    def _pieces(self, tokens: tuple[int, ...], spans: tuple[MediaSpan, ...]) -> list[npt.NDArray[Any]]:
        """An input as the runs of text and the media rows it is decoded as (rows from the media cache, or
        encoded now on the engine thread)."""
        assert self.encoder is not None  # checked when the request was submitted
        pieces: list[npt.NDArray[Any]] = []
        done = 0
        for span in spans:
            if span.start > done:
                pieces.append(np.asarray(tokens[done : span.start], dtype=np.int32))
            rows = self.encoder.cached(span)
            if rows is None and (
                self.encoder.started_beside(span) or (self.encoder.can_encode_beside and self._generating())
            ):
                rows = self.encoder.encode_beside(span)
                if rows is None:
                    raise _EncodingBeside
            pieces.append(rows if rows is not None else self.encoder.encode(span))
            done = span.end
        if done < len(tokens):
            pieces.append(np.asarray(tokens[done:], dtype=np.int32))
        return pieces

    def cancel(self, sink: ResultSink) -> None:
        """Drop the request answered on ``sink`` (its client has gone); no-op once it is answered."""
        self._jobs = collections.deque(job for job in self._jobs if job.sink is not sink)

    def fail_all(self, error: BaseException) -> None:
        while self._jobs:
            self._jobs.popleft().sink.put(error)
