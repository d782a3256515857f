"""The engine thread: the only code that decodes, with three verbs, ``submit``, ``cancel``, ``close``.

One thread owns the llama context. Requests arrive through a queue; each step the engine gives waiting
requests a slot, each starting from the longest cached prefix it can reuse (:mod:`~lfmserve.engine.admission`,
:mod:`~lfmserve.engine.memory`), then decodes one batch over every running generation
(:mod:`~lfmserve.engine.step`), whose new text goes to the request's sink (:mod:`~lfmserve.engine.generation`).
Callers never wait on the engine and the engine never waits on them; the ``/slots`` commands, which do wait,
go through :mod:`~lfmserve.engine.slot_control`. Requests are checked before they are queued
(:mod:`~lfmserve.engine.validation`), and commands reach the thread through its :mod:`~lfmserve.engine.inbox`.

Example::

    engine = Engine(model, EngineConfig(n_ctx=4096, n_slots=4))
    stream = SyncStream()
    engine.submit(EngineRequest(prompt_tokens=(1, 6, ...)), stream)
    text = "".join(out.text for out in stream)
    engine.close()
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import os
import threading
import time
from concurrent.futures import Future
from importlib.metadata import version

from ..errors import EngineError, NotSupported, RequestCancelled, Unavailable
from ..llama.backend import init_numa
from ..llama.context import NativeContext
from ..llama.control_vectors import apply_control_vector, load_control_vectors
from ..llama.embedding import EmbeddingContext
from ..llama.model import NativeModel
from ..llama.mtmd import Projector
from ..llama.owner import name_os_thread
from ..llama.threadpool import keeps_thread_placement, set_process_priority
from .adapters import Adapters
from .admission import Admission
from .disk_cache import DiskPromptCache
from .embeddings import EmbeddingQueue, EmbeddingRequest, ResultSink, check_embedding_request
from .generation import Generation, Submission
from .inbox import Inbox
from .media import MediaEncoder
from .memory import SlotMemory
from .prompt_cache import RamPromptCache
from .records import EngineConfig, EngineRequest, EngineStats, SlotTask, ThreadPlacement
from .scheduler import Slot
from .slot_control import SlotControl
from .speculation.config import SpeculationConfig
from .speculation.costs import CostMeter, measure_batch_costs
from .speculation.draft_model import DraftModel
from .speculation.exactness import Verification, exact_batch_size
from .speculation.speculator import Speculator
from .speculation.worth import LINEAR_COSTS, BatchCosts, drafts_can_pay
from .step import BatchStep
from .stream import OutputSink
from .validation import RequestBounds

logger = logging.getLogger(__name__)

#: What ``--spec-exact``'s start line says the default does instead.
_WITHOUT_EXACT = "without --spec-exact, drafts are verified in batches of any size, as llama-server does"


class Engine:
    """Continuous batching over ``n_slots`` sequences of one shared llama context."""

    def __init__(self, model: NativeModel, config: EngineConfig, *, projector: Projector | None = None) -> None:
        """Make the contexts and start the engine thread; if any step fails, what the steps before it acquired
        (contexts, the disk cache's writer, the encoder's thread) is released before the error is raised."""
        self.model = model
        self.config = config
        with contextlib.ExitStack() as acquired:
            self._acquire(model, config, projector, acquired)
            self._release = acquired.pop_all()

    def _acquire(
        self, model: NativeModel, config: EngineConfig, projector: Projector | None, acquired: contextlib.ExitStack
    ) -> None:
        """The constructor's work; each native resource is put on ``acquired`` as soon as it exists."""
        self._ctx = _context(model, config)
        acquired.callback(self._ctx.close)
        self.n_ctx = self._ctx.n_ctx
        #: ``--lora``: the adapters, their server-wide scales, and which generations share a decode.
        self.adapters = Adapters(model, config.lora)
        self.stats = EngineStats()
        exact = not model.info.needs_checkpoints(swa_full=config.kv.swa_full)
        disk = _disk_cache(model, self._ctx, config, self.stats, acquired)
        self._memory = SlotMemory(self._ctx, config, self.stats, exact_truncation=exact, disk=disk)
        if projector is not None and self._memory.shifts_context:
            logger.warning("--context-shift is not supported with a multimodal projector: it is off")
            self._memory.shifts_context = False  # a media chunk's positions cannot be cut in half
        self.n_ctx_slot = self._memory.n_ctx_slot
        self._inbox = Inbox()
        #: Media chunks' embeddings (None without a projector: such requests are refused).
        self.media = None
        if projector is not None:
            self.media = MediaEncoder(
                projector, max_bytes=config.media_cache_bytes, stats=self.stats, wake=self._inbox.wake
            )
            acquired.callback(self.media.close)
        #: ``--embeddings``: inputs embedded on a second context, between generation steps.
        self.embeddings = None
        if config.embeddings:
            context = _embedding_context(model, config, projector)
            acquired.callback(context.close)
            self.embeddings = EmbeddingQueue(context, self.media, lambda: bool(self._running), stats=self.stats)
        self._step = BatchStep(self._ctx, self._memory, self.stats, config, encoder=self.media)
        self._admission = Admission(model, self._ctx, self._memory, self._step, self.stats, config, self.adapters)
        self._bounds = RequestBounds(
            n_ctx_slot=self.n_ctx_slot, n_vocab=model.n_vocab, n_slots=config.n_slots, media=self.media is not None
        )
        self._slot_control = SlotControl(self._ctx, self._memory, self._inbox, media=projector is not None)
        self._waiting: list[Submission] = []
        self._running: dict[int, Generation] = {}
        self._ids = itertools.count(1)
        self._closing = False  # the engine thread's own flag, set when it reaches the stop
        ready: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="lfmserve-engine", daemon=True)
        self._thread.start()
        acquired.callback(self._end_thread)  # a failed start: the thread has ended before its contexts are freed
        ready.result()  # the engine thread's first decodes (warm-up, speculation's measurements), or their error

    def buffers(self) -> dict[str, int]:
        """llama.cpp's buffers for this model in bytes, by what they hold: the weights' (``CPU_Mapped``,
        ``CPU_REPACK``, ...) and its contexts' (``KV``, ``RS``, ``compute``, ``output``; the embedding context's
        added in)."""
        totals = dict(self.model.buffers)
        for context in [self._ctx.buffers] + ([self.embeddings.context.buffers] if self.embeddings else []):
            for kind, size in context.items():
                totals[kind] = totals.get(kind, 0) + size
        return totals

    # -- the three verbs (any thread) ----------------------------------------------------------
    def submit(self, request: EngineRequest, sink: OutputSink) -> int:
        """Queue a request; its outputs arrive on ``sink``. Invalid requests raise here, at once."""
        self._bounds.check(request)
        self.adapters.scales_of(request.lora)
        if len(self._waiting) >= self.config.max_queue:
            raise Unavailable(f"the server is busy: {len(self._waiting)} requests are waiting for a slot")
        submission = Submission(next(self._ids), request, sink)
        self._inbox.send(lambda: self._accept(submission))
        return submission.id

    def cancel(self, request_id: int) -> None:
        """Stop a request at the next step and free its slot; no-op when it already finished."""
        self._inbox.post(lambda: self._cancel(request_id))

    def submit_embeddings(self, request: EmbeddingRequest, sink: ResultSink) -> None:
        """Queue inputs to embed; the result (or the error) arrives on ``sink``. Invalid ones raise here."""
        if self.embeddings is None:
            raise NotSupported("This server does not support embeddings. Start it with `--embeddings`")
        check_embedding_request(
            request, n_ubatch=self.embeddings.context.n_ubatch, n_vocab=self.model.n_vocab, media=self.media is not None
        )
        queue = self.embeddings
        self._inbox.send(lambda: queue.add(request, sink))

    def cancel_embeddings(self, sink: ResultSink) -> None:
        """Stop embedding the request answered on ``sink`` at the next group (its client has gone)."""
        if self.embeddings is not None:
            queue = self.embeddings
            self._inbox.post(lambda: queue.cancel(sink))

    def close(self) -> None:
        """Finish the thread (requests still running or waiting get :class:`Unavailable`), then free the contexts."""
        if not self._inbox.close(self._stop):
            return
        self._thread.join()
        self._memory.persist()
        if self._step.speculator is not None:
            self._step.speculator.close()
        self._release.close()

    # -- introspection (/slots, /metrics, the in-process API) ------------------------------------
    @property
    def n_slots(self) -> int:
        return len(self._memory.slots)

    @property
    def slots(self) -> tuple[Slot, ...]:
        return self._memory.slots

    @property
    def shifts_kv(self) -> bool:
        """Whether ``--cache-reuse`` is in effect (attention-only models whose memory can shift)."""
        return self._memory.shifts_kv

    @property
    def n_waiting(self) -> int:
        return len(self._waiting)

    @property
    def busy(self) -> bool:
        """Whether any request is running or waiting for a slot."""
        return bool(self._waiting) or any(slot.busy for slot in self._memory.slots)

    @property
    def ram_cache(self) -> RamPromptCache:
        return self._memory.ram

    # -- one slot (SlotControl does the work; the commands wait until the engine has run them) ------
    def slot_request(self, slot_id: int) -> EngineRequest | None:
        """The request a slot is running, if any."""
        return self._slot_control.request(slot_id)

    def slot_task(self, slot_id: int) -> SlotTask | None:
        """What ``/slots`` shows of the request slot ``slot_id`` runs, or ran last; None before its first."""
        return self._slot_control.task(slot_id)

    def slot_tokens(self, slot_id: int) -> list[int]:
        """A copy of the tokens slot ``slot_id`` holds in memory (its prompt cache)."""
        return self._slot_control.tokens(slot_id)

    def clear_slot(self, slot_id: int) -> int:
        """Forget an idle slot's cache; returns how many tokens it held."""
        return self._slot_control.erase(slot_id)

    def save_slot(self, slot_id: int, path: str) -> tuple[int, int]:
        """Write an idle slot's sequence to ``path``: (tokens saved, bytes written)."""
        return self._slot_control.save(slot_id, path)

    def restore_slot(self, slot_id: int, path: str) -> tuple[int, int]:
        """Load a saved sequence into an idle slot: (tokens restored, bytes read)."""
        return self._slot_control.restore(slot_id, path)

    # -- engine thread -------------------------------------------------------------------------
    def _prepare(self) -> None:
        """The decodes before the first step: ``--warmup``'s, then speculation's measurements of the batch costs
        (on slot 0's sequence while it is still empty). They run on the engine thread, which decodes from now on:
        a decode on the loading thread leaves OpenMP a second team of threads, and every later step about a third
        slower on two cores."""
        if self.config.warmup:
            self._ctx.warm_up()
        self.verification, self._step.speculator = _speculation(self.model, self._ctx, self.config, self.n_ctx_slot)

    def _end_thread(self) -> None:
        """Stop the engine thread's loop (if it got that far: an interrupted start) and wait for it."""
        self._inbox.close(self._stop)
        self._thread.join()

    def _run(self, ready: Future[None]) -> None:
        try:
            name_os_thread("lfmserve-engine")  # which OpenMP's workers inherit: its team can be told apart
            self._prepare()
        except BaseException as exc:  # handed to the constructor, which raises it where the engine is made
            ready.set_exception(exc)
            return
        ready.set_result(None)
        stalled = False  # the last step only waited for encodes beside: sleep until one ends (or a command)
        embedding_waits = False  # so did the oldest embedding request
        while not self._closing:
            idle = not self._waiting and not self._running
            can_embed = self.embeddings is not None and self.embeddings.pending and not embedding_waits
            measuring = idle and self._step.measure_idle()  # speculation's costs, a decode between two looks
            self._inbox.run(block=(stalled or idle) and not can_embed and not measuring)
            if self._closing:
                break
            stalled = embedding_waits = False
            try:
                self._start_waiting()
                running = self.adapters.batch(self._ctx, self._live())
                if running:
                    progressed = self._step.run(running)
                    stalled = not progressed and self.media is not None and self.media.encoding_beside
                if self.embeddings is not None and self.embeddings.pending:
                    # one group between steps: streams wait a micro-batch at most
                    embedding_waits = not self.embeddings.run_one()
            except Exception as exc:  # a bug must cost the requests in flight, never the engine
                logger.exception("engine step failed; failing the active requests")
                for gen in self._live():
                    self._memory.reset(gen.slot)
                    gen.fail(EngineError(f"internal engine error: {exc}"))
            self._running = {gen.id: gen for gen in self._live()}
        for gen in self._live():
            gen.fail(Unavailable("the server is shutting down"))
        for submission in self._waiting:
            submission.sink.put(Unavailable("the server is shutting down"))
        if self.embeddings is not None:
            self.embeddings.fail_all(Unavailable("the server is shutting down"))
        if self.media is not None:
            self.media.close()

    def _live(self) -> list[Generation]:
        """The generations still running, oldest request first (one may finish as it starts, or be cancelled
        between steps); the oldest gets the prefill budget of a step first."""
        return sorted((gen for gen in self._running.values() if not gen.done), key=lambda gen: gen.id)

    def _stop(self) -> None:
        self._closing = True

    def _accept(self, submission: Submission) -> None:
        self._waiting.append(submission)
        self.stats.n_requests += 1

    def _cancel(self, request_id: int) -> None:
        cancelled = RequestCancelled(f"request {request_id} was cancelled")
        gen = self._running.get(request_id)
        if gen is not None and not gen.done:
            gen.fail(cancelled)
            return
        for submission in self._waiting:
            if submission.id == request_id:
                self._waiting.remove(submission)
                submission.sink.put(cancelled)
                return

    # -- starting requests -----------------------------------------------------------------------
    def _start_waiting(self) -> None:
        """Give waiting requests a slot, oldest first; the others keep waiting (and count as deferred)."""
        waiting, self._waiting = self._waiting, []
        for submission in waiting:
            slot: Slot | None = None
            try:
                placed = self._admission.place(submission.request, self._live())
                if placed is None:
                    self._defer(submission)
                    continue
                slot, plan = placed
                self._admission.start(submission, slot, plan, self._running)
                self._slot_control.started(self._running[submission.id])
            except Exception as exc:
                logger.exception("request %d could not start", submission.id)
                self._fail_start(submission, slot, exc if isinstance(exc, EngineError) else EngineError(str(exc)))

    def _defer(self, submission: Submission) -> None:
        self._waiting.append(submission)
        if not submission.deferred:
            submission.deferred = True
            self.stats.n_requests_deferred += 1

    def _fail_start(self, submission: Submission, slot: Slot | None, error: EngineError) -> None:
        """A request that could not start: its slot's half-prepared memory is dropped and the slot freed."""
        if slot is not None:
            self._memory.reset(slot)
        gen = self._running.pop(submission.id, None)
        if gen is not None:
            if not gen.done:
                gen.fail(error)
            return
        if slot is not None:
            slot.busy = False
            slot.last_used = time.monotonic()
        submission.sink.put(error)


@keeps_thread_placement
def _context(model: NativeModel, config: EngineConfig) -> NativeContext:
    """The shared context of the slots: one sequence per slot, sized as llama-server sizes it. Its logits rows are
    llama.cpp's default, a whole batch's: llama.cpp aborts the process on a decode that asks for more rows than
    ``n_outputs_max`` (``GGML_ASSERT``), and the rows reserved beyond a step's are address space, barely resident.
    ``--control-vector``'s files are read first (a bad one stops the start before the context is made) and set on
    it as llama-server sets them on its context."""
    vector = load_control_vectors(config.control_vectors) if config.control_vectors else None
    ctx = NativeContext(
        model,
        n_ctx=config.context_sizes(model.info.n_ctx_train).n_ctx,
        n_batch=config.n_batch,
        n_ubatch=config.n_ubatch,
        n_seq_max=config.n_slots,
        n_threads=config.n_threads,
        n_threads_batch=config.n_threads_batch or config.n_threads,
        kv=config.kv,
        rope=config.rope,
    )
    try:
        _place_threads(ctx, config.threads)
        if vector is not None:
            apply_control_vector(ctx, vector, config.control_vector_layers)
    except BaseException:
        ctx.close()
        raise
    if vector is not None:
        logger.info("control vectors: %s", ", ".join(f"{path} at {scale:g}" for path, scale in config.control_vectors))
    return ctx


def _place_threads(ctx: NativeContext, threads: ThreadPlacement) -> None:
    """``--numa`` (once a process), the context's threadpools (``-C``, ``--prio``, ``--poll`` and the rest, with their
    batch forms), then ``--prio``'s process priority, which llama-server sets once its context is made. NUMA comes
    before the first decode, not before the model loads as in llama-server: only the weights' mapping (no read-ahead
    on a machine of several nodes) misses it."""
    if threads.numa is not None:
        init_numa(threads.numa)
    ctx.place_threads(threads.generation, threads.batch)
    set_process_priority(threads.generation.prio)


def _disk_cache(
    model: NativeModel, ctx: NativeContext, config: EngineConfig, stats: EngineStats, acquired: contextlib.ExitStack
) -> DiskPromptCache | None:
    """``--cache-disk``, if given, its writer stopped by ``acquired``. Entries waiting for its writer may hold a
    quarter of ``--cache-ram`` more (the RAM cache may have let them go), so a slow disk costs dropped files, not
    unbounded memory."""
    if not config.cache_disk:
        return None
    identity = _cache_identity(model, ctx, config)
    disk = DiskPromptCache(
        config.cache_disk, config.cache_disk_bytes, identity, max_pending_bytes=config.cache_ram_bytes // 4, stats=stats
    )
    acquired.callback(disk.close)
    return disk


def _cache_identity(model: NativeModel, ctx: NativeContext, config: EngineConfig) -> str:
    """What a saved sequence state fits: this llama.cpp, this model, a slot of this size, these KV cache types, these
    LoRA adapters and control vectors."""
    info, kv = model.info, config.kv
    adapters = [[os.path.abspath(path), os.path.getsize(path)] for path, _ in config.lora]
    vectors = [[os.path.abspath(path), os.path.getsize(path), scale] for path, scale in config.control_vectors]
    return json.dumps(
        [version("llama-cpp-python"), info.architecture, info.name, info.n_params, info.size_bytes, info.n_vocab]
        + [info.n_embd, ctx.n_ctx // config.n_slots, kv.type_k, kv.type_v, kv.swa_full, kv.flash_attn, adapters]
        + ([vectors, config.control_vector_layers] if vectors else [])  # without: the identity of before
    )


def _speculation(
    model: NativeModel, ctx: NativeContext, config: EngineConfig, n_ctx_slot: int
) -> tuple[Verification, Speculator | None]:
    """How drafts are verified, and the drafters of ``--spec-type`` (None without it: nothing is measured)."""
    spec = config.speculation
    if not spec.enabled:
        return Verification(exact=spec.exact), None
    return _speculator(model, ctx, config, n_ctx_slot)


@keeps_thread_placement
def _speculator(
    model: NativeModel, ctx: NativeContext, config: EngineConfig, n_ctx_slot: int
) -> tuple[Verification, Speculator | None]:
    """How drafts are verified here, and the drafters of ``--spec-type``; with ``draft-simple``, the draft model's
    context beside ``ctx``. No drafters where ``--spec-exact`` leaves no draft that could pay: drafting would only
    slow decoding.

    It is built on the engine thread before its first step: with ``--spec-exact`` it measures the batch costs and the
    exact batch size on slot 0's sequence while that is still empty (without, the costs are measured between
    requests).
    """
    spec = config.speculation
    n_max = config.n_slots + spec.max_draft
    # --spec-exact decides from the costs whether to draft at all: measured now; else between requests.
    costs, meter = (
        (measure_batch_costs(ctx, seq_id=0, n_max=n_max), None)
        if spec.exact
        else (LINEAR_COSTS, CostMeter(n_max, adaptive=config.adaptive_threads))
    )
    verification = _verification(ctx, spec, costs)
    if not verification.drafting:
        return verification, None
    exact = verification.exact_batch
    draft_model = None
    if spec.draft_model is not None and "draft-simple" in spec.types:
        logger.info("draft model %s (draft-simple, up to %d tokens a step)", spec.draft_model, spec.n_max)
        draft_model = DraftModel(
            model,
            NativeModel(spec.draft_model, placement=config.draft_placement, repack=model.repack),
            n_ctx=ctx.n_ctx,
            n_batch=config.n_batch,
            n_slots=config.n_slots,
            n_threads=spec.n_threads or config.n_threads,
            n_threads_batch=spec.n_threads_batch or spec.n_threads or config.n_threads,
            kv=dataclasses.replace(config.kv, type_k=spec.type_k, type_v=spec.type_v),
            n_max=spec.n_max,
            p_min=spec.p_min,
            placement=config.threads.draft,
            placement_batch=config.threads.draft_batch,
        )
    try:
        speculator = Speculator(
            spec,
            n_ctx_slot=n_ctx_slot,
            draft_model=draft_model,
            costs=costs,
            meter=meter,
            measure_again=lambda: CostMeter(n_max, adaptive=config.adaptive_threads),
            exact_batch=exact,
        )
    except BaseException:
        if draft_model is not None:
            draft_model.close()
        raise
    return verification, speculator


def _verification(ctx: NativeContext, spec: SpeculationConfig, costs: BatchCosts) -> Verification:
    """``--spec-exact``'s measured batch size and what it leaves of drafting, said in one line: a warning where it
    turns drafting off, else what it allows (a line too where synthetic acceptance overrides it)."""
    if not spec.exact:
        return Verification(drafting=True)
    if spec.synth_rates:  # drafts kept by chance: their verification's numbers do not matter
        logger.info("--spec-exact does not apply to synthetic acceptance: drafts are verified whole")
        return Verification(drafting=True)
    exact = exact_batch_size(ctx, seq_id=0, n_max=1 + spec.max_draft)
    if not drafts_can_pay(costs, exact):
        why = (
            "compute no batch of 2 tokens or more as they compute each token alone"
            if exact == 1
            else f"compute a batch of more than {exact} tokens differently from decoding them one at a time, and a "
            "batch that small costs more than decoding its tokens one at a time"
        )
        logger.warning(
            "speculative decoding is off: with --spec-exact, llama.cpp's kernels here %s (%s; near ties can then go "
            "either way)",
            why,
            _WITHOUT_EXACT,
        )
        return Verification(exact=True, exact_batch=exact)
    logger.info(
        "speculative decoding with --spec-exact: drafts of up to %d tokens verified, as llama.cpp's kernels here "
        "compute a batch of up to %d tokens as they compute each token alone (%s)",
        exact - 1,
        exact,
        _WITHOUT_EXACT,
    )
    return Verification(exact=True, exact_batch=exact, drafting=True)


def _embedding_context(model: NativeModel, config: EngineConfig, projector: Projector | None) -> EmbeddingContext:
    """The second context ``--embeddings`` decodes on, so that embedding never touches the slots' memory."""
    return EmbeddingContext(
        model,
        pooling=config.pooling,
        n_ubatch=config.n_ubatch,
        n_seq_max=config.embedding_sequences,
        n_threads=config.n_threads_batch or config.n_threads,
        non_causal_media=projector is not None and projector.non_causal_images,
        rope=config.rope,
    )
