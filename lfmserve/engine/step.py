"""One decoding step: a single ``llama_batch`` over every running generation (continuous batching).

The batch holds the next token of every generation that is sampling, then chunks of the prompts being
prefilled in the room left, one sequence id per slot. While streams are generating, prompts get at
most one micro-batch (``-ub``) per step, so a long prompt delays them by a fraction of a second per
token instead of freezing them for its whole prefill. A prompt chunk stops at the next checkpoint
position, where the state is saved after the decode.

Media positions take embedding rows, which llama.cpp decodes in a batch of their own: after the token
batch's decode (and its sampling), the same step decodes the media rows of the prompts that have reached
one, in the room left. Rows that mtmd decodes with causal attention off (Gemma 3's images) are decoded as
mtmd-helper decodes them: a span's rows in one decode (in micro-batch pieces only when longer than one),
never beside rows that attend causally, so such a span waits for a step with room for all of it. Encoding a
media chunk costs seconds of CPU for a real projector's image. While other generations run it happens beside
them, on the encoder's worker with cores the engine lends it (decoding goes on with the rest), and the prompt
waits for its rows; a generation alone encodes on the engine thread with every core, one chunk per step.

Invariants. A slot's ``tokens`` are the positions its sequence holds after every step: a sampled token waits in
``pending_token`` until the next step decodes it, a rejected draft's cells are removed, and the tokens a
restored recurrent state lost wait in ``replay``. Each generation's logits are at its ``batch_index`` of the
batch just decoded (-1: it asked for none). A step decodes every generation it is given; the engine gives it
those still running, so a finished generation leaves the batch. A failed decode fails every generation given
and resets their slots, because what the context holds of them is unknown. A prefill-only prompt asks for no
logits and finishes when its last chunk is decoded.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Sequence

from ..errors import EngineError
from ..llama.batch import Batch
from ..llama.context import NativeContext
from ..llama.mtmd import attention
from .generation import Generation
from .media import MediaEncoder, Rows
from .memory import SlotMemory
from .records import EngineConfig, EngineStats, MediaSpan
from .speculation.speculator import Speculator
from .threads import ThreadTuner

logger = logging.getLogger(__name__)


class BatchStep:
    """One step of the engine: one batch over the running generations, decoded, and each generation moved on.

    A stream gets exactly one decode per step (its pending token, a draft riding after it); prompts fill the
    room left, oldest first, one micro-batch per step while streams generate. The module docstring gives the
    invariants. Only the engine thread calls :meth:`run`.
    """

    def __init__(
        self,
        ctx: NativeContext,
        memory: SlotMemory,
        stats: EngineStats,
        config: EngineConfig,
        *,
        encoder: MediaEncoder | None = None,
        speculator: Speculator | None = None,
    ) -> None:
        self._ctx = ctx
        self._threads = ThreadTuner(ctx.n_threads, ctx.n_threads_batch, adaptive=config.adaptive_threads)
        self._memory = memory
        self._stats = stats
        self._n_ubatch = config.n_ubatch
        self._encoder = encoder
        self.speculator = speculator
        self._recurrent = ctx.model.info.is_hybrid or ctx.model.info.is_recurrent

    def measure_idle(self) -> bool:
        """Between requests: the speculator's cost measurement goes on by one decode; whether more is due."""
        if self.speculator is None:
            return False
        return self.speculator.measure_idle(self._ctx, self._memory.slots, single_decodes_on=self._threads.chosen(1))

    def run(self, running: Sequence[Generation]) -> bool:
        """Decode one batch for ``running`` and move each generation on (a chunk prefilled, a token sampled).

        False when there was nothing to do but wait for encodes beside (the encoder's ``wake`` ends the wait).
        """
        batch = self._ctx.batch
        batch.clear()
        if self._memory.shifts_context:
            self._shift_full_slots(running)
        if self.speculator is not None:
            self.speculator.plan([g for g in running if g.pending_token is not None], batch.capacity)
        for gen in running:
            gen.batch_index = -1
            if gen.pending_token is not None:
                start = len(gen.slot.tokens)  # tokens to replay first (see ``_verify``), then the pending one
                gen.batch_index = batch.add((*gen.replay, gen.pending_token, *gen.draft), start, gen.slot.id, True)
                if gen.draft:
                    batch.logits[gen.batch_index - len(gen.draft) : gen.batch_index] = 1  # every drafted position
                    gen.batch_index -= len(gen.draft)
        streaming = batch.n_tokens > 0
        # While streams generate, prompts get one micro-batch per step: inter-token latency stays bounded.
        budget = self._n_ubatch if streaming else batch.capacity
        prefill_chunks: list[tuple[Generation, int]] = []
        for gen in running:
            if gen.prefilling and budget > 0 and batch.free > 0 and _media_at(gen, len(gen.slot.tokens)) is None:
                n = self._add_prompt_chunk(gen, min(budget, batch.free))
                budget -= n
                prefill_chunks.append((gen, n))
        decoded = batch.n_tokens > 0
        if decoded and self._recurrent:
            self._snapshot_drafting(running)
        if decoded and self._decode(batch, running, n_prompt=sum(n for _, n in prefill_chunks)):
            for gen, n in prefill_chunks:
                self.after_prompt_chunk(gen, n, time.perf_counter())
            for gen in running:
                if gen.pending_token is not None and gen.batch_index >= 0:
                    gen.slot.tokens.extend(gen.replay)
                    gen.slot.tokens.append(gen.pending_token)
                    gen.replay = ()
                if gen.batch_index >= 0 and not gen.done:
                    if gen.draft:
                        self._verify(gen)
                    else:
                        gen.sample(self._ctx)
                        gen.observe_unverified()
            _note_lengths(self._stats, running)
        if self._encoder is not None and budget > 0:
            beside = self._encoder.can_encode_beside and (streaming or len(running) > 1)
            decoded |= self._run_media(running, budget, streaming=streaming, beside=beside)
        return decoded

    def _shift_full_slots(self, running: Sequence[Generation]) -> None:
        """``--context-shift``: a generation whose pending token would take its slot's last cell drops tokens
        after its kept start (the request's ``n_keep``, ``n_discard``), and goes on (llama-server's ``pre_decode``)."""
        for gen in running:
            if gen.pending_token is not None and len(gen.slot.tokens) + 1 >= self._memory.n_ctx_slot:
                n_discard = self._memory.shift_context(gen.slot, gen.request)
                gen.truncated = True
                gen.drafters = None  # some index the history by position: rebuilt from the shifted one
                logger.debug("request %d: context shift dropped %d tokens of slot %d", gen.id, n_discard, gen.slot.id)

    # -- speculation ------------------------------------------------------------------------------
    def _snapshot_drafting(self, running: Sequence[Generation]) -> None:
        """Save the recurrent state of each drafting generation: a rejected draft restores it.

        llama.cpp's own way, keeping the last ``n_rs_seq`` per-token states, fails two ways measured here: in a
        batch of several sequences it decodes several micro-batches and moves recurrent cells between them
        while the kept states stay where they were written, so a rollback restored another sequence's state
        (after a rejected draft beside three streams the next logits were off by up to 17); and keeping 24
        or more states made LFM2-350M's graph overflow (``GGML_ASSERT(obj_new)``) at the first decode. The
        state of LFM2's convolutions is small (80 KiB for LFM2-350M): saving it each drafting step costs little.
        """
        for gen in running:
            gen.snapshot = None
            if gen.draft and gen.batch_index >= 0:
                gen.snapshot = (len(gen.slot.tokens), self._ctx.get_state(gen.slot.id, partial=True))

    def _verify(self, gen: Generation) -> None:
        """Sample ``gen``'s drafted positions in turn, then drop the rejected ones from the slot's memory.

        A recurrent model's state is restored from the snapshot taken before the decode instead, and the
        tokens kept since are decoded again in the next step (replayed), as llama-server re-evaluates them.
        """
        draft = gen.draft
        pending_at = len(gen.slot.tokens) - 1  # the pending token is in the slot's tokens already
        decoded_end = pending_at + 1 + len(draft)
        assert self.speculator is not None
        accepted = gen.sample_drafted(self._ctx, draft, self.speculator.synth_rates)
        self.speculator.verified(gen, accepted)
        kept = len(gen.slot.tokens)
        if kept == decoded_end:
            return
        seq = gen.slot.id
        if gen.snapshot is not None:
            kept, state = gen.snapshot  # the state before this step's tokens (replayed ones included)
            self._ctx.set_state(seq, state, partial=True)
            gen.replay = () if gen.done else tuple(gen.slot.tokens[kept:])
            del gen.slot.tokens[kept:]
        if not self._ctx.seq_rm(seq, kept, -1):
            raise EngineError(f"could not roll back slot {seq} to {kept} tokens after a draft")

    def _decode(self, batch: Batch, running: Sequence[Generation], *, n_prompt: int, causal: bool = True) -> bool:
        """Decode ``batch``, which holds ``n_prompt`` prompt positions, with causal attention or (media rows that
        mtmd decodes so) without; a failure fails every running generation (False).

        The thread tuner picks how many threads decode it (:mod:`.threads`); an encode beside borrows some. The
        prompt's metrics count the positions decoded and the time of the decodes that held them; a token batch
        counts as a decode (media rows do not, as in llama-server's ``n_decode_total``).
        """
        lent = self._encoder.projector.side_threads if self._encoder and self._encoder.encoding_beside else 0
        self._ctx.use_threads(count := self._threads.pick(batch.n_tokens), lent=lent)
        t0 = time.perf_counter()
        try:
            with attention(self._ctx.handle, non_causal=not causal):
                self._ctx.decode(batch)
            elapsed = time.perf_counter() - t0
            if not lent:  # a decode with threads lent says nothing of the counts' speeds
                self._threads.observe(batch.n_tokens, count, elapsed)
                if self.speculator is not None and not n_prompt and batch is self._ctx.batch:
                    self.speculator.observe(self._ctx, count, elapsed)
        except EngineError as exc:
            logger.error("%s; failing the %d requests in the batch", exc, len(running))
            for gen in running:
                self._memory.reset(gen.slot)
                gen.fail(exc)
            return False
        stats = self._stats
        if n_prompt:
            stats.n_prompt_tokens += n_prompt
            stats.prompt_seconds += elapsed
        if batch is self._ctx.batch:
            stats.n_decode_calls += 1
            stats.n_busy_slots_sum += sum(1 for slot in self._memory.slots if slot.busy)
        rows = "tokens" if batch is self._ctx.batch else "embedding rows"
        logger.debug("step: %d %s (%d sequences) in %.1f ms", batch.n_tokens, rows, len(running), 1e3 * elapsed)
        return True

    def _add_prompt_chunk(self, gen: Generation, room: int) -> int:
        """Add up to ``room`` prompt tokens, stopping at the next checkpoint position or media chunk."""
        done = len(gen.slot.tokens)
        n = min(_prefill_end(gen, done) - done, room)
        wants_logits = done + n == len(gen.prompt) and gen.request.max_tokens != 0
        index = self._ctx.batch.add(gen.prompt[done : done + n], done, gen.slot.id, wants_logits)
        if wants_logits:
            gen.batch_index = index
        return n

    # -- media ------------------------------------------------------------------------------------
    def _run_media(self, running: Sequence[Generation], budget: int, *, streaming: bool, beside: bool) -> bool:
        """Get the rows of media chunks that are due, and decode those of prompts at media positions; False when
        nothing happened (every prompt at a media position waits for an encode beside)."""
        assert self._encoder is not None
        batch = self._ctx.embd_batch
        batch.clear()
        budget = min(budget, batch.capacity)
        progressed = encoded_here = False
        chunks: list[tuple[Generation, int]] = []
        for gen in running:
            gen.batch_index = -1
            if not gen.prefilling or budget <= 0:
                continue
            done = len(gen.slot.tokens)
            span = _media_at(gen, done)
            if span is None:
                continue
            if gen.media_rows is None or gen.media_rows[0] is not span:
                ready, encoded = self._take_rows(gen, span, beside=beside, may_encode=not encoded_here)
                progressed |= encoded or gen.done
                encoded_here |= encoded
                if not ready or (encoded and streaming):  # the streams waited for an encode: rows next step
                    continue
            assert gen.media_rows is not None
            rows = gen.media_rows[1][done - span.start :]  # from the first row not decoded yet
            n = _media_rows_due(gen, span, budget, batch.capacity, chunks)
            if n == 0:
                continue  # next step: room for the whole span, or a batch of its own attention
            wants_logits = done + n == len(gen.prompt) and gen.request.max_tokens != 0
            index = batch.add_embeddings(rows[:n], done, gen.slot.id, wants_logits)
            if wants_logits:
                gen.batch_index = index
            budget -= n
            chunks.append((gen, n))
        if not chunks or not self._decode(batch, running, n_prompt=sum(n for _, n in chunks), causal=_causal(chunks)):
            return progressed or bool(chunks)
        now = time.perf_counter()
        for gen, n in chunks:
            self.after_prompt_chunk(gen, n, now)
            if gen.media_rows is not None and len(gen.slot.tokens) >= gen.media_rows[0].end:
                gen.media_rows = None
            if gen.batch_index >= 0 and not gen.done:
                gen.sample(self._ctx)
        _note_lengths(self._stats, running)
        return True

    def _take_rows(self, gen: Generation, span: MediaSpan, *, beside: bool, may_encode: bool) -> tuple[bool, bool]:
        """Give ``gen`` the span's rows if they are at hand: (whether it has them, whether this thread encoded). An
        encode that fails fails this generation only."""
        try:
            rows, encoded = self._rows(span, beside=beside, may_encode=may_encode)
        except EngineError as exc:  # this request's media, not the others'
            logger.error("request %d: %s", gen.id, exc)
            self._memory.reset(gen.slot)
            gen.fail(exc)
            return False, False
        if rows is not None:
            gen.media_rows = (span, rows)
        return rows is not None, encoded

    def _rows(self, span: MediaSpan, *, beside: bool, may_encode: bool) -> tuple[Rows | None, bool]:
        """A span's rows if they are at hand (cached, or an encode beside has finished), and whether this
        thread encoded them; None while an encode beside runs, or when this step has already encoded one."""
        assert self._encoder is not None
        rows = self._encoder.cached(span)
        if rows is not None:
            return rows, False
        if beside or self._encoder.started_beside(span):
            return self._encoder.encode_beside(span), False
        if not may_encode:
            return None, False  # one encode per step: this one waits for the next
        return self._encoder.encode(span), True

    def after_prompt_chunk(self, gen: Generation, n: int, now: float) -> None:
        """``n`` more prompt tokens are in the slot's memory: checkpoint where due, and note the prompt's end.

        ``n`` is 0 for a prompt that was all cached.
        """
        slot = gen.slot
        done = len(slot.tokens)
        slot.tokens.extend(gen.prompt[done : done + n])
        if n > 0:
            gen.time_prompt(now)
            gen.report_progress(now)
        boundary = _checkpoint_due(gen)
        if boundary is not None:
            self._memory.checkpoint(slot, boundary=boundary)
        if len(slot.tokens) != len(gen.prompt):
            return
        if n > 0 and not self._memory.can_truncate:
            # The end of the prompt, with its logits: the same prompt again (a regenerated reply) samples at
            # once, and no prefill is split before its last token for the sake of a checkpoint.
            logits = self._ctx.logits(gen.batch_index).tobytes() if gen.batch_index >= 0 else None
            self._memory.checkpoint(slot, boundary=False, logits=logits)
        gen.prompt_done(now)


def _note_lengths(stats: EngineStats, running: Sequence[Generation]) -> None:
    """After a decode: the longest sequence a slot holds (``n_tokens_max``: prompt and generation)."""
    stats.n_tokens_max = max(stats.n_tokens_max, *(len(gen.slot.tokens) for gen in running))


def _media_at(gen: Generation, position: int) -> MediaSpan | None:
    """The media span that covers ``position`` of the generation's prompt, if any."""
    spans = gen.request.media
    if not spans:
        return None
    i = bisect.bisect_right(spans, position, key=lambda span: span.start) - 1
    return spans[i] if i >= 0 and position < spans[i].end else None


def _prefill_end(gen: Generation, done: int) -> int:
    """Where a prefill chunk from ``done`` must stop: the next checkpoint, media boundary or prompt end."""
    end = gen.checkpoints_due[0][0] if gen.checkpoints_due else len(gen.prompt)
    span = _media_at(gen, done)
    if span is not None:
        return min(end, span.end)
    spans = gen.request.media
    i = bisect.bisect_right(spans, done, key=lambda span: span.start)
    return min(end, spans[i].start) if i < len(spans) else end


def _media_rows_due(
    gen: Generation, span: MediaSpan, budget: int, capacity: int, batched: Sequence[tuple[Generation, int]]
) -> int:
    """How many rows of ``span`` the generation decodes in this step, up to ``budget``: to the next checkpoint,
    or, for rows mtmd decodes with causal attention off, the rest of the span at once (in pieces of a micro-batch,
    ``capacity``, only when it is longer). 0 until a step has room for that, or while the rows ``batched`` so far
    attend the other way."""
    if batched and _causal(batched) == span.chunk.non_causal:
        return 0
    done = len(gen.slot.tokens)
    if not span.chunk.non_causal:
        return min(_prefill_end(gen, done) - done, budget)
    n = min(span.end - done, capacity)
    return n if n <= budget else 0


def _causal(batched: Sequence[tuple[Generation, int]]) -> bool:
    """Whether the media rows of ``batched`` (generations at their media rows) decode with causal attention."""
    rows = batched[0][0].media_rows if batched else None
    return rows is None or not rows[0].chunk.non_causal


def _checkpoint_due(gen: Generation) -> bool | None:
    """Whether the slot's state is to be checkpointed now, as a message boundary (True) or not (False); None when
    no checkpoint is due. Those passed over fell inside rows decoded at once (``_media_rows_due``): no state there.
    """
    n_tokens = len(gen.slot.tokens)
    while gen.checkpoints_due and gen.checkpoints_due[0][0] < n_tokens:
        gen.checkpoints_due.pop(0)
    if gen.checkpoints_due and gen.checkpoints_due[0][0] == n_tokens:
        return gen.checkpoints_due.pop(0)[1]
    return None
