"""The engine thread: the only code that decodes, with three verbs, ``submit``, ``cancel``, ``close``.

One thread owns the llama context. Each step it builds one ``llama_batch``: the next token of every
generating request, then chunks of waiting prompts in the space left (continuous batching, one
sequence id per slot), decodes it, samples each request's next token, and hands the new text to the
request's sink. Callers never wait on the engine and the engine never waits on them.

Example::

    engine = Engine(model, EngineConfig(n_ctx=4096, n_slots=4))
    stream = SyncStream()
    engine.submit(EngineRequest(prompt_tokens=(1, 6, ...)), stream)
    text = "".join(out.text for out in stream)
    engine.close()
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .detokenizer import StreamingDetokenizer
from .errors import ContextLengthExceeded, EngineError, InvalidRequest, RequestCancelled
from .native import ContextFull, NativeContext, NativeModel, Sampler
from .records import EngineOutput, EngineRequest, FinishReason, StopType, Timings
from .scheduler import Checkpoint, Slot, choose_slot, plan_reuse
from .stop import StopMatcher
from .stream import OutputSink

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    n_ctx: int = 0
    n_slots: int = 1
    n_batch: int = 2048
    n_ubatch: int = 512
    n_threads: int = 1
    n_threads_batch: int | None = None


@dataclass(slots=True, eq=False)
class _Job:
    """A request while the engine runs it (engine-thread state only)."""

    id: int
    request: EngineRequest
    sink: OutputSink
    slot: Slot | None = None
    sampler: Sampler | None = None
    detokenizer: StreamingDetokenizer | None = None
    stopper: StopMatcher | None = None
    n_cached: int = 0
    pending_token: int | None = None
    batch_index: int = -1
    n_decoded: int = 0
    timings: Timings = field(default_factory=Timings)
    t_prompt_start: float = 0.0
    t_generation_start: float = 0.0
    cancelled: bool = False

    @property
    def prompt(self) -> tuple[int, ...]:
        return self.request.prompt_tokens

    @property
    def prefilling(self) -> bool:
        return self.slot is not None and self.pending_token is None

    def output(self, text: str, tokens: tuple[int, ...], **finish: str) -> EngineOutput:
        assert self.slot is not None
        return EngineOutput(
            text=text,
            token_ids=tokens,
            id_slot=self.slot.id,
            n_prompt_tokens=len(self.prompt),
            n_cached_tokens=self.n_cached,
            n_decoded=self.n_decoded,
            timings=replace(self.timings),
            **finish,  # type: ignore[arg-type]
        )


class Engine:
    """Continuous batching over ``n_slots`` sequences of one shared llama context."""

    def __init__(self, model: NativeModel, config: EngineConfig) -> None:
        self.model = model
        self.config = config
        self._ctx = NativeContext(
            model,
            n_ctx=config.n_ctx,
            n_batch=config.n_batch,
            n_ubatch=config.n_ubatch,
            n_seq_max=config.n_slots,
            n_threads=config.n_threads,
            n_threads_batch=config.n_threads_batch or config.n_threads,
        )
        self.n_ctx = self._ctx.n_ctx
        self.n_ctx_slot = self._ctx.n_ctx_seq
        self._can_truncate = not model.info.needs_checkpoints
        self._slots = [Slot(i) for i in range(config.n_slots)]
        self._waiting: list[_Job] = []
        self._jobs: dict[int, _Job] = {}
        self._inbox: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._ids = itertools.count(1)
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="lfmserve-engine", daemon=True)
        self._thread.start()

    # -- the three verbs (any thread) ----------------------------------------------------------
    def submit(self, request: EngineRequest, sink: OutputSink) -> int:
        """Queue a request; its outputs arrive on ``sink``. Invalid requests raise here, at once."""
        self._validate(request)
        job = _Job(next(self._ids), request, sink)
        self._inbox.put(lambda: self._accept(job))
        return job.id

    def cancel(self, request_id: int) -> None:
        """Stop a request at the next step and free its slot; no-op when it already finished."""
        self._inbox.put(lambda: self._mark_cancelled(request_id))

    def close(self) -> None:
        """Finish the thread (pending requests get :class:`RequestCancelled`), then free the context."""
        if not self._closing:
            self._inbox.put(self._stop)
            self._thread.join()
            self._ctx.close()

    # -- helpers for the in-process API and /slots --------------------------------------------
    @property
    def n_slots(self) -> int:
        return len(self._slots)

    def slot_tokens(self, slot_id: int) -> list[int]:
        """A copy of the tokens slot ``slot_id`` holds in memory (its prompt cache)."""
        return list(self._slots[slot_id].tokens)

    def clear_slot(self, slot_id: int) -> None:
        """Forget a slot's cache (waits until the engine has done it)."""
        done = threading.Event()

        def clear() -> None:
            slot = self._slots[slot_id]
            if not slot.busy:
                self._reset_slot(slot)
            done.set()

        self._inbox.put(clear)
        done.wait()

    # -- validation (caller's thread) ----------------------------------------------------------
    def _validate(self, request: EngineRequest) -> None:
        if self._closing:
            raise RequestCancelled("the engine is shutting down")
        n = len(request.prompt_tokens)
        if n == 0:
            raise InvalidRequest("The prompt is empty", param="prompt")
        if n >= self.n_ctx_slot:
            raise ContextLengthExceeded(n, self.n_ctx_slot)
        bad = next((t for t in request.prompt_tokens if not self.model.is_valid_token(t)), None)
        if bad is not None:
            raise InvalidRequest(
                f"Invalid token id {bad} in the prompt (vocabulary has {self.model.n_vocab})", param="prompt"
            )
        if request.id_slot >= len(self._slots):
            raise InvalidRequest(
                f"id_slot {request.id_slot} does not exist (there are {len(self._slots)} slots)", param="id_slot"
            )

    # -- engine thread -------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._closing:
            self._drain_inbox(block=not self._jobs)
            if self._closing:
                break
            try:
                self._start_waiting()
                if any(job.slot is not None for job in self._jobs.values()):
                    self._step()
            except Exception as exc:  # a bug must cost the requests in flight, never the engine
                logger.exception("engine step failed; failing the active requests")
                for job in [j for j in self._jobs.values() if j.slot is not None]:
                    self._reset_slot(job.slot)  # type: ignore[arg-type]
                    self._finish_with_error(job, EngineError(f"internal engine error: {exc}"))
        for job in list(self._jobs.values()):
            self._finish_with_error(job, RequestCancelled("the engine is shutting down"))

    def _drain_inbox(self, *, block: bool) -> None:
        try:
            command = self._inbox.get(block=block)
            while True:
                command()
                command = self._inbox.get_nowait()
        except queue.Empty:
            pass

    def _stop(self) -> None:
        self._closing = True

    def _accept(self, job: _Job) -> None:
        self._jobs[job.id] = job
        self._waiting.append(job)

    def _mark_cancelled(self, request_id: int) -> None:
        job = self._jobs.get(request_id)
        if job is not None:
            self._finish_with_error(job, RequestCancelled(f"request {request_id} was cancelled"))

    def _start_waiting(self) -> None:
        """Give waiting requests a slot, oldest first; a request whose slot is busy keeps waiting."""
        waiting, self._waiting = self._waiting, []
        for job in waiting:
            slot = choose_slot(self._slots, job.prompt, job.request.id_slot)
            if slot is None:
                self._waiting.append(job)
                continue
            try:
                self._start(job, slot)
            except Exception as exc:
                logger.exception("request %d could not start", job.id)
                self._reset_slot(slot)
                self._finish_with_error(job, exc if isinstance(exc, EngineError) else EngineError(str(exc)))

    def _start(self, job: _Job, slot: Slot) -> None:
        request = job.request
        plan = plan_reuse(
            slot,
            job.prompt,
            cache_prompt=request.cache_prompt,
            needs_logits=request.max_tokens != 0,
            can_truncate=self._can_truncate,
        )
        if plan.clear:
            self._reset_slot(slot)
        elif plan.restore:
            assert slot.checkpoint is not None
            self._ctx.set_state(slot.id, slot.checkpoint.state, partial=True)
        if len(slot.tokens) > plan.keep:
            if not self._ctx.seq_rm(slot.id, plan.keep, -1):
                self._reset_slot(slot)
            else:
                del slot.tokens[plan.keep :]
        slot.busy = True
        job.slot = slot
        job.n_cached = len(slot.tokens)
        job.timings.cache_n = job.n_cached
        job.sampler = Sampler(self.model, request.sampling, job.prompt, self.n_ctx_slot)
        job.detokenizer = StreamingDetokenizer(self._piece_function(request.keep_special))
        job.stopper = StopMatcher(request.stop)
        job.t_prompt_start = time.perf_counter()
        if len(slot.tokens) == len(job.prompt):  # a prefill-only request whose tokens are all cached
            self._after_prompt_chunk(job, 0, job.t_prompt_start)
            return
        logger.debug("request %d: slot %d, prompt %d tokens, %d cached", job.id, slot.id, len(job.prompt), job.n_cached)

    def _piece_function(self, keep_special: frozenset[int]) -> Callable[[int], bytes]:
        to_piece = self.model.token_to_piece
        if not keep_special:
            return to_piece
        return lambda token: to_piece(token, special=token in keep_special)

    def _reset_slot(self, slot: Slot) -> None:
        self._ctx.seq_clear(slot.id)
        slot.tokens.clear()
        slot.checkpoint = None

    # -- one decoding step ---------------------------------------------------------------------
    def _step(self) -> None:
        batch = self._ctx.batch
        batch.clear()
        active = [job for job in self._jobs.values() if job.slot is not None]
        prefill_chunks: list[tuple[_Job, int]] = []
        for job in active:
            job.batch_index = -1
            if job.pending_token is not None:
                assert job.slot is not None
                job.batch_index = batch.add((job.pending_token,), len(job.slot.tokens), job.slot.id, True)
        for job in active:
            if job.prefilling and batch.free > 0:
                prefill_chunks.append((job, self._add_prompt_chunk(job)))
        if batch.n_tokens == 0:
            return
        t0 = time.perf_counter()
        try:
            self._decode_making_room()
        except EngineError as exc:
            logger.error("%s; failing the %d requests in the batch", exc, len(active))
            for job in active:
                if job.slot is not None:
                    self._reset_slot(job.slot)
                self._finish_with_error(job, exc)
            return
        t1 = time.perf_counter()
        logger.debug("step: %d tokens (%d sequences) in %.1f ms", batch.n_tokens, len(active), 1e3 * (t1 - t0))
        for job, n in prefill_chunks:
            self._after_prompt_chunk(job, n, t1)
        for job in active:
            if job.pending_token is not None and job.batch_index >= 0 and not job.cancelled:
                assert job.slot is not None
                job.slot.tokens.append(job.pending_token)
            if job.batch_index >= 0 and not job.cancelled:
                self._sample(job, t1)

    def _decode_making_room(self) -> None:
        """Decode; when the shared KV cache is full, drop idle slots' caches (least recently used first)."""
        idle = sorted((s for s in self._slots if not s.busy and s.tokens), key=lambda s: s.last_used)
        while True:
            try:
                self._ctx.decode()
                return
            except ContextFull:
                if not idle:
                    raise
                slot = idle.pop(0)
                logger.info("KV cache full: dropping idle slot %d's cache (%d tokens)", slot.id, len(slot.tokens))
                self._reset_slot(slot)

    def _add_prompt_chunk(self, job: _Job) -> int:
        """Add as much of the prompt as fits; stop one token short of the end to checkpoint there."""
        assert job.slot is not None
        done = len(job.slot.tokens)
        end = len(job.prompt)
        if not self._can_truncate and done < end - 1:
            end -= 1  # the state before the last prompt token is the checkpoint a repeat can restore
        n = min(end - done, self._ctx.batch.free)
        last = done + n == len(job.prompt)
        index = self._ctx.batch.add(
            job.prompt[done : done + n], done, job.slot.id, last and job.request.max_tokens != 0
        )
        if last and job.request.max_tokens != 0:
            job.batch_index = index
        return n

    def _after_prompt_chunk(self, job: _Job, n: int, now: float) -> None:
        assert job.slot is not None
        slot = job.slot
        done = len(slot.tokens)
        slot.tokens.extend(job.prompt[done : done + n])
        if not self._can_truncate and len(slot.tokens) == len(job.prompt) - 1:
            slot.checkpoint = Checkpoint(len(slot.tokens), self._ctx.get_state(slot.id, partial=True))
        if len(slot.tokens) == len(job.prompt):
            job.timings.prompt_n = len(job.prompt) - job.n_cached
            job.timings.prompt_ms = 1e3 * (now - job.t_prompt_start)
            job.t_generation_start = now
            if job.request.max_tokens == 0:
                self._finish(job, "", (), "length", "limit")

    def _sample(self, job: _Job, now: float) -> None:
        assert job.sampler is not None and job.detokenizer is not None and job.stopper is not None
        assert job.slot is not None
        token = job.sampler.sample(self._ctx, job.batch_index)
        job.n_decoded += 1
        job.timings.predicted_n = job.n_decoded
        job.timings.predicted_ms = 1e3 * (time.perf_counter() - job.t_generation_start)
        request = job.request
        if self.model.is_eog(token) and not request.sampling.ignore_eos:
            self._finish(job, job.detokenizer.flush() + job.stopper.flush(), (token,), "stop", "eos")
            return
        text, stop_word = job.stopper.feed(job.detokenizer.add(token))
        if stop_word is not None:
            self._finish(job, text, (token,), "stop", "word", stop_word)
        elif job.n_decoded == request.max_tokens or len(job.slot.tokens) + 1 >= self.n_ctx_slot:
            tail, _ = job.stopper.feed(job.detokenizer.flush())
            self._finish(job, text + tail + job.stopper.flush(), (token,), "length", "limit")
        else:
            job.pending_token = token
            job.sink.put(job.output(text, (token,)))

    def _finish(
        self,
        job: _Job,
        text: str,
        tokens: tuple[int, ...],
        reason: FinishReason,
        stop_type: StopType,
        stopping_word: str = "",
    ) -> None:
        job.sink.put(job.output(text, tokens, finish_reason=reason, stop_type=stop_type, stopping_word=stopping_word))
        t = job.timings
        logger.info(
            "request %d done: slot %d, prompt %d (cached %d), completion %d, ttft %.0f ms, %.1f tok/s (%s)",
            job.id,
            job.slot.id if job.slot else -1,
            len(job.prompt),
            job.n_cached,
            job.n_decoded,
            t.prompt_ms,
            t.to_json()["predicted_per_second"],
            stop_type,
        )
        self._release(job)

    def _finish_with_error(self, job: _Job, error: BaseException) -> None:
        job.cancelled = True
        job.sink.put(error)
        if job in self._waiting:
            self._waiting.remove(job)
        self._release(job)

    def _release(self, job: _Job) -> None:
        self._jobs.pop(job.id, None)
        if job.sampler is not None:
            job.sampler.close()
            job.sampler = None
        if job.slot is not None:
            job.slot.busy = False
            job.slot.last_used = time.monotonic()
            job.slot = None
