"""The engine thread: the only code that decodes, with three verbs, ``submit``, ``cancel``, ``close``.

One thread owns the llama context. Each step it builds one ``llama_batch``: the next token of every
generating request, then chunks of waiting prompts in the space left (continuous batching, one
sequence id per slot; while streams are generating, prompts get at most one micro-batch per step so
a long prompt cannot freeze them), decodes it, samples each request's next token, and hands the new
text to the request's sink. Callers never wait on the engine and the engine never waits on them.

Prompt caching (``scheduler.plan_reuse``): a request starts from the longest cached prefix of its own
slot, of another slot (shared KV cells plus a checkpoint of the recurrent state), or of a sequence
kept in host RAM, where idle slots move whenever a request starts. While prefilling, the recurrent /
sliding-window state is checkpointed at chat message boundaries, every 256 tokens, and at the end of
the prompt (with its logits).

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
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from .detokenizer import StreamingDetokenizer
from .errors import ContextLengthExceeded, EngineError, InvalidRequest, RequestCancelled, Unavailable
from .native import NativeContext, NativeModel, Sampler
from .prompt_cache import RamPromptCache
from .records import EngineOutput, EngineRequest, FinishReason, StopType, Timings
from .scheduler import (
    CachedSequence,
    Checkpoint,
    ReusePlan,
    Slot,
    checkpoint_positions,
    choose_slot,
    common_prefix_length,
    plan_reuse,
    shifted_chunks,
)
from .stop import StopMatcher
from .stream import OutputSink

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    n_ctx: int = 0
    n_slots: int = 1
    n_batch: int = 2048
    n_ubatch: int = 512
    n_threads: int = 1
    n_threads_batch: int | None = None
    #: Idle slot chosen when its cache shares more than this fraction of the prompt (llama-server's 0.10).
    slot_similarity: float = 0.10
    #: Requests waiting for a slot beyond this answer 503.
    max_queue: int = 1024
    #: Checkpoints kept per slot, by count and by bytes.
    max_checkpoints: int = 32
    max_checkpoint_bytes: int = 256 * 2**20
    #: Host RAM for sequences evicted from slots (0 = off).
    cache_ram_bytes: int = 8192 * 2**20
    #: ``--cache-reuse``: shortest cached run moved by KV shifting (0 = off; attention-only models).
    cache_reuse: int = 0


@dataclass(slots=True)
class EngineStats:
    """Counters since start, for /metrics and /slots (written by the engine thread only)."""

    n_prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    n_predicted_tokens: int = 0
    predicted_seconds: float = 0.0
    n_decode_calls: int = 0
    n_busy_slots_sum: int = 0
    n_requests: int = 0
    n_requests_deferred: int = 0
    n_cache_hits: int = 0
    n_cached_tokens: int = 0
    n_checkpoints_saved: int = 0
    n_checkpoints_restored: int = 0
    n_slot_copies: int = 0
    n_ram_saves: int = 0
    n_ram_restores: int = 0
    n_shifted_tokens: int = 0


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
    checkpoints_due: list[tuple[int, bool]] = field(default_factory=list)
    deferred: bool = False
    timings: Timings = field(default_factory=Timings)
    t_prompt_start: float = 0.0
    t_generation_start: float = 0.0

    @property
    def prompt(self) -> tuple[int, ...]:
        return self.request.prompt_tokens

    @property
    def prefilling(self) -> bool:
        return self.slot is not None and self.pending_token is None

    def output(self, text: str, tokens: tuple[int, ...], **finish: str) -> EngineOutput:
        assert self.slot is not None
        logprob = self.sampler.last_logprob if self.sampler is not None and tokens else None
        return EngineOutput(
            logprobs=(logprob,) if logprob is not None else (),
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
        #: Each slot's limit: the context divided among the slots, as llama-server's -np.
        self.n_ctx_slot = self.n_ctx // config.n_slots
        self._can_truncate = not model.info.needs_checkpoints
        #: ``--cache-reuse`` applies to attention-only models whose memory can shift (not hybrid or SWA ones).
        self._shifting = config.cache_reuse > 0 and self._can_truncate and self._ctx.can_shift
        self._turn_ends = model.eog_tokens
        newline = model.tokenize("\n", add_special=False, parse_special=False)
        self._newline = newline[0] if len(newline) == 1 else None
        self._slots = [Slot(i, n_ctx=self.n_ctx_slot) for i in range(config.n_slots)]
        self._ram = RamPromptCache(config.cache_ram_bytes)
        self.stats = EngineStats()
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

    # -- introspection (/slots, /metrics, the in-process API) ------------------------------------
    @property
    def n_slots(self) -> int:
        return len(self._slots)

    @property
    def slots(self) -> tuple[Slot, ...]:
        return tuple(self._slots)

    @property
    def shifts_kv(self) -> bool:
        """Whether ``--cache-reuse`` is in effect (attention-only models whose memory can shift)."""
        return self._shifting

    @property
    def n_waiting(self) -> int:
        return len(self._waiting)

    @property
    def ram_cache(self) -> RamPromptCache:
        return self._ram

    def slot_request(self, slot_id: int) -> EngineRequest | None:
        """The request a slot is running, if any."""
        return next((j.request for j in list(self._jobs.values()) if j.slot is self._slots[slot_id]), None)

    def slot_tokens(self, slot_id: int) -> list[int]:
        """A copy of the tokens slot ``slot_id`` holds in memory (its prompt cache)."""
        return list(self._slots[slot_id].tokens)

    def clear_slot(self, slot_id: int) -> int:
        """Forget a slot's cache; returns how many tokens it held (waits until the engine has done it)."""
        return self._call(lambda: self._erase(self._idle_slot(slot_id)))

    def save_slot(self, slot_id: int, path: str) -> tuple[int, int]:
        """Write an idle slot's sequence to ``path``: (tokens saved, bytes written)."""

        def save() -> tuple[int, int]:
            slot = self._idle_slot(slot_id)
            return len(slot.tokens), self._ctx.save_seq_file(slot.id, path, slot.tokens)

        return self._call(save)

    def restore_slot(self, slot_id: int, path: str) -> tuple[int, int]:
        """Load a saved sequence into an idle slot: (tokens restored, bytes read)."""

        def restore() -> tuple[int, int]:
            slot = self._idle_slot(slot_id)
            self._reset_slot(slot)
            try:
                tokens, n_read = self._ctx.load_seq_file(slot.id, path, slot.n_ctx)
            except EngineError:
                self._reset_slot(slot)
                raise
            slot.tokens = tokens
            return len(tokens), n_read

        return self._call(restore)

    def _call(self, command: Callable[[], T]) -> T:
        """Run ``command`` on the engine thread between steps and return its result here."""
        done = threading.Event()
        box: list[T | BaseException] = []

        def run() -> None:
            try:
                box.append(command())
            except BaseException as exc:  # delivered to the caller
                box.append(exc)
            done.set()

        self._inbox.put(run)
        done.wait()
        result = box[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def _idle_slot(self, slot_id: int) -> Slot:
        if not 0 <= slot_id < len(self._slots):
            raise InvalidRequest(f"slot {slot_id} does not exist (there are {len(self._slots)})", param="id_slot")
        slot = self._slots[slot_id]
        if slot.busy:
            raise Unavailable(f"slot {slot_id} is processing a request")
        return slot

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
        if len(self._waiting) >= self.config.max_queue:
            raise Unavailable(f"the server is busy: {len(self._waiting)} requests are waiting for a slot")

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
        self.stats.n_requests += 1

    def _mark_cancelled(self, request_id: int) -> None:
        job = self._jobs.get(request_id)
        if job is not None:
            self._finish_with_error(job, RequestCancelled(f"request {request_id} was cancelled"))

    # -- starting requests -----------------------------------------------------------------------
    def _start_waiting(self) -> None:
        """Give waiting requests a slot, oldest first; the others keep waiting (and count as deferred)."""
        waiting, self._waiting = self._waiting, []
        for job in waiting:
            slot = choose_slot(self._slots, job.prompt, job.request.id_slot, self.config.slot_similarity)
            plan = self._plan(job, slot) if slot is not None else None
            if slot is None or plan is None:
                self._waiting.append(job)
                if not job.deferred:
                    job.deferred = True
                    self.stats.n_requests_deferred += 1
                continue
            try:
                self._start(job, slot, plan)
            except Exception as exc:
                logger.exception("request %d could not start", job.id)
                self._reset_slot(slot)
                self._finish_with_error(job, exc if isinstance(exc, EngineError) else EngineError(str(exc)))

    def _plan(self, job: _Job, slot: Slot) -> ReusePlan | None:
        """The reuse plan, or None when a prefix this prompt shares is being computed in another slot."""
        request = job.request
        plan = plan_reuse(
            slot,
            job.prompt,
            others=[s for s in self._slots if s is not slot and s.tokens],
            ram=self._ram.entries,
            cache_prompt=request.cache_prompt,
            needs_logits=request.max_tokens != 0,
            can_truncate=self._can_truncate,
        )
        if request.cache_prompt:
            for other in self._jobs.values():
                if other.slot is not None and other.prefilling:
                    shared = common_prefix_length(other.prompt, job.prompt)
                    if shared > max(plan.keep, len(other.slot.tokens)) + 64:
                        return None  # compute the shared prefix once: wait for it, then copy it
        return plan

    def _start(self, job: _Job, slot: Slot, plan: ReusePlan) -> None:
        if plan.keep < len(slot.tokens) / 2:  # most of the slot's cache is about to go (llama-server's rule)
            self._save_to_ram(slot)
        request = job.request
        if self._shifting and plan.source in ("own", "ram"):
            if plan.ram_entry is not None:  # the whole parked sequence back first, then shift within it
                self._apply(slot, replace(plan, keep=len(plan.ram_entry.tokens)))
                plan = ReusePlan("own", plan.keep)
            plan = replace(plan, keep=self._shift_cached_chunks(slot, job.prompt, plan.keep, request.max_tokens != 0))
        self._apply(slot, plan)
        slot.busy = True
        self._park_idle_slots()
        job.slot = slot
        job.n_cached = len(slot.tokens)
        job.timings.cache_n = job.n_cached
        if job.n_cached:
            self.stats.n_cache_hits += 1
            self.stats.n_cached_tokens += job.n_cached
        job.sampler = Sampler(
            self.model, request.sampling, job.prompt, self.n_ctx_slot, mask=request.mask, n_probs=request.n_probs
        )
        job.detokenizer = StreamingDetokenizer(self._piece_function(request.keep_special))
        job.stopper = StopMatcher(request.stop)
        if not self._can_truncate:
            if job.n_cached and all(c.n_tokens != job.n_cached for c in slot.checkpoints):
                # Free (no decode call): the memory is exact where prefilling starts, typically the end of
                # the previous reply, so an edit of the message that follows needs nothing recomputed before it.
                self._checkpoint(slot, boundary=False)
            job.checkpoints_due = checkpoint_positions(
                job.prompt, job.n_cached, turn_ends=self._turn_ends, newline=self._newline
            )
        job.t_prompt_start = time.perf_counter()
        logger.debug(
            "request %d: slot %d, prompt %d tokens, %d reused (%s)",
            job.id,
            slot.id,
            len(job.prompt),
            job.n_cached,
            plan.source,
        )
        if len(slot.tokens) == len(job.prompt):  # all cached: prefill-only, or the logits were kept
            self._after_prompt_chunk(job, 0, job.t_prompt_start)
            if request.max_tokens != 0:
                assert plan.checkpoint is not None and plan.checkpoint.logits is not None
                self._sample(job, job.t_prompt_start, np.frombuffer(plan.checkpoint.logits, dtype=np.float32).copy())

    def _apply(self, slot: Slot, plan: ReusePlan) -> None:
        """Bring the slot's memory to the plan's prefix."""
        if plan.source == "none":
            self._reset_slot(slot)
            return
        if plan.source == "slot":
            source = plan.source_slot
            assert source is not None
            self._reset_slot(slot)
            self._ctx.seq_cp(source.id, slot.id, plan.keep)
            slot.tokens = source.tokens[: plan.keep]
            slot.checkpoints = [c for c in source.checkpoints if c.n_tokens <= plan.keep]
            self.stats.n_slot_copies += 1
        elif plan.source == "ram":
            entry = plan.ram_entry
            assert entry is not None
            self._reset_slot(slot)
            self._ctx.set_state(slot.id, entry.state, partial=False)
            slot.tokens = list(entry.tokens)
            slot.checkpoints = list(entry.checkpoints)
            self._ram.touch(entry)
            self.stats.n_ram_restores += 1
        if plan.checkpoint is not None:
            self._ctx.set_state(slot.id, plan.checkpoint.state, partial=True)
            self.stats.n_checkpoints_restored += 1
        if len(slot.tokens) > plan.keep:
            if not self._ctx.seq_rm(slot.id, plan.keep, -1):
                raise EngineError(f"could not truncate slot {slot.id} to {plan.keep} tokens")
            slot.truncate(plan.keep)

    def _shift_cached_chunks(self, slot: Slot, prompt: tuple[int, ...], keep: int, needs_logits: bool) -> int:
        """``--cache-reuse``: move the cached runs the prompt repeats after its common prefix into place.

        Returns the longer prefix the slot's memory now holds. Attention-only models only: the moved
        keys are re-rotated to their new positions, an approximation llama-server makes too (the moved
        tokens were computed after other context).
        """
        n_past = keep
        for shift in shifted_chunks(slot.tokens, prompt, keep, self.config.cache_reuse):
            self._ctx.seq_rm(slot.id, shift.target, shift.source)
            self._ctx.seq_shift(slot.id, shift.source, shift.source + shift.n, shift.target - shift.source)
            n_past = shift.target + shift.n
        n_past = min(n_past, len(prompt) - 1 if needs_logits else len(prompt))
        if n_past > keep:
            if not self._ctx.seq_rm(slot.id, n_past, -1):
                raise EngineError(f"could not truncate slot {slot.id} to {n_past} tokens")
            slot.tokens = list(prompt[:n_past])
            self.stats.n_shifted_tokens += n_past - keep
        return n_past

    def _park_idle_slots(self) -> None:
        """Move the idle slots' sequences to host RAM, so that the KV cache holds only running ones.

        Attention reads every used cell of the unified cache, whichever sequence it belongs to: 2,000
        idle cells slow single-stream decoding from 125 to 95 tok/s on LFM2-350M (llama-bench at that
        depth). llama-server clears idle slots the same way (``--cache-idle-slots``). A parked
        sequence comes back from RAM with one copy; one that RAM cannot take (no RAM cache, or bigger than
        all of it) stays where it is rather than be lost.
        """
        for slot in self._slots:
            if not slot.busy and slot.tokens and self._save_to_ram(slot):
                self._reset_slot(slot)

    def _save_to_ram(self, slot: Slot) -> bool:
        """Keep a slot's sequence in host RAM before its memory is replaced (if it is worth keeping).

        False when the sequence is worth keeping but the RAM cache cannot take it (off, or too big).
        """
        if len(slot.tokens) < 32 or self._ram.covers(slot.tokens):
            return True
        if any(o is not slot and common_prefix_length(o.tokens, slot.tokens) == len(slot.tokens) for o in self._slots):
            return True  # another slot holds it all
        if self._ram.max_bytes <= 0:
            return False
        entry = CachedSequence(tuple(slot.tokens), self._ctx.get_state(slot.id, partial=False), tuple(slot.checkpoints))
        if not self._ram.put(entry):
            return False
        self.stats.n_ram_saves += 1
        logger.debug("slot %d: %d tokens kept in RAM (%.1f MiB)", slot.id, len(slot.tokens), entry.n_bytes / 2**20)
        return True

    def _piece_function(self, keep_special: frozenset[int]) -> Callable[[int], bytes]:
        to_piece = self.model.token_to_piece
        if not keep_special:
            return to_piece
        return lambda token: to_piece(token, special=token in keep_special)

    def _reset_slot(self, slot: Slot) -> None:
        self._ctx.seq_clear(slot.id)
        slot.tokens.clear()
        slot.checkpoints = []

    def _erase(self, slot: Slot) -> int:
        n = len(slot.tokens)
        self._reset_slot(slot)
        return n

    # -- one decoding step ---------------------------------------------------------------------
    def _step(self) -> None:
        batch = self._ctx.batch
        batch.clear()
        active = [job for job in self._jobs.values() if job.slot is not None]
        for job in active:
            job.batch_index = -1
            if job.pending_token is not None:
                assert job.slot is not None
                job.batch_index = batch.add((job.pending_token,), len(job.slot.tokens), job.slot.id, True)
        # While streams generate, prompts get one micro-batch per step: inter-token latency stays bounded.
        budget = self.config.n_ubatch if batch.n_tokens else batch.capacity
        prefill_chunks: list[tuple[_Job, int]] = []
        for job in active:
            if job.prefilling and budget > 0 and batch.free > 0:
                n = self._add_prompt_chunk(job, min(budget, batch.free))
                budget -= n
                prefill_chunks.append((job, n))
        if batch.n_tokens == 0:
            return
        t0 = time.perf_counter()
        try:
            self._ctx.decode()
        except EngineError as exc:
            logger.error("%s; failing the %d requests in the batch", exc, len(active))
            for job in active:
                if job.slot is not None:
                    self._reset_slot(job.slot)
                self._finish_with_error(job, exc)
            return
        t1 = time.perf_counter()
        self.stats.n_decode_calls += 1
        self.stats.n_busy_slots_sum += len(active)
        logger.debug("step: %d tokens (%d sequences) in %.1f ms", batch.n_tokens, len(active), 1e3 * (t1 - t0))
        for job, n in prefill_chunks:
            self._after_prompt_chunk(job, n, t1)
        for job in active:
            if job.pending_token is not None and job.batch_index >= 0:
                assert job.slot is not None
                job.slot.tokens.append(job.pending_token)
            if job.batch_index >= 0 and job.slot is not None:
                self._sample(job, t1)

    def _add_prompt_chunk(self, job: _Job, room: int) -> int:
        """Add up to ``room`` prompt tokens, stopping at the next checkpoint position."""
        assert job.slot is not None
        done = len(job.slot.tokens)
        end = len(job.prompt)
        if job.checkpoints_due:
            end = job.checkpoints_due[0][0]
        n = min(end - done, room)
        last = done + n == len(job.prompt)
        wants_logits = last and job.request.max_tokens != 0
        index = self._ctx.batch.add(job.prompt[done : done + n], done, job.slot.id, wants_logits)
        if wants_logits:
            job.batch_index = index
        return n

    def _after_prompt_chunk(self, job: _Job, n: int, now: float) -> None:
        assert job.slot is not None
        slot = job.slot
        done = len(slot.tokens)
        slot.tokens.extend(job.prompt[done : done + n])
        if job.checkpoints_due and job.checkpoints_due[0][0] == len(slot.tokens):
            _, boundary = job.checkpoints_due.pop(0)
            self._checkpoint(slot, boundary=boundary)
        if len(slot.tokens) == len(job.prompt) and n > 0 and not self._can_truncate:
            # The end of the prompt, with its logits: the same prompt again (a regenerated reply) samples at
            # once, and no prefill is split before its last token for the sake of a checkpoint.
            logits = self._ctx.logits(job.batch_index).tobytes() if job.batch_index >= 0 else None
            self._checkpoint(slot, boundary=False, logits=logits)
        if len(slot.tokens) == len(job.prompt):
            job.timings.prompt_n = len(job.prompt) - job.n_cached
            job.timings.prompt_ms = 1e3 * (now - job.t_prompt_start)
            self.stats.n_prompt_tokens += job.timings.prompt_n
            self.stats.prompt_seconds += now - job.t_prompt_start
            job.t_generation_start = now
            if job.request.max_tokens == 0:
                self._finish(job, "", (), "length", "limit")

    def _checkpoint(self, slot: Slot, *, boundary: bool, logits: bytes | None = None) -> None:
        state = self._ctx.get_state(slot.id, partial=True)
        slot.add_checkpoint(
            Checkpoint(len(slot.tokens), state, boundary, logits),
            max_count=self.config.max_checkpoints,
            max_bytes=self.config.max_checkpoint_bytes,
        )
        self.stats.n_checkpoints_saved += 1

    def _sample(self, job: _Job, now: float, stored_logits: npt.NDArray[np.float32] | None = None) -> None:
        assert job.sampler is not None and job.detokenizer is not None and job.stopper is not None
        assert job.slot is not None
        token = job.sampler.sample(self._ctx, job.batch_index, stored_logits)
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
        elif job.sampler.grammar_finished:
            tail, _ = job.stopper.feed(job.detokenizer.flush())
            self._finish(job, text + tail + job.stopper.flush(), (token,), "stop", "eos")
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
        self.stats.n_predicted_tokens += job.n_decoded
        self.stats.predicted_seconds += t.predicted_ms / 1e3
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
