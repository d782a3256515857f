"""One decoding step: a single ``llama_batch`` over every running generation (continuous batching).

The batch holds the next token of every generation that is sampling, then chunks of the prompts being
prefilled in the room left, one sequence id per slot. While streams are generating, prompts get at
most one micro-batch (``-ub``) per step, so a long prompt delays them by a fraction of a second per
token instead of freezing them for its whole prefill. A prompt chunk stops at the next checkpoint
position, where the state is saved after the decode.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from ..errors import EngineError
from ..llama.context import NativeContext
from .generation import Generation
from .memory import SlotMemory
from .records import EngineStats

logger = logging.getLogger(__name__)


class BatchStep:
    def __init__(self, ctx: NativeContext, memory: SlotMemory, stats: EngineStats, *, n_ubatch: int) -> None:
        self._ctx = ctx
        self._memory = memory
        self._stats = stats
        self._n_ubatch = n_ubatch

    def run(self, running: Sequence[Generation]) -> None:
        """Decode one batch for ``running`` and move each generation on (a chunk prefilled, a token sampled)."""
        batch = self._ctx.batch
        batch.clear()
        for gen in running:
            gen.batch_index = -1
            if gen.pending_token is not None:
                gen.batch_index = batch.add((gen.pending_token,), len(gen.slot.tokens), gen.slot.id, True)
        # While streams generate, prompts get one micro-batch per step: inter-token latency stays bounded.
        budget = self._n_ubatch if batch.n_tokens else batch.capacity
        prefill_chunks: list[tuple[Generation, int]] = []
        for gen in running:
            if gen.prefilling and budget > 0 and batch.free > 0:
                n = self._add_prompt_chunk(gen, min(budget, batch.free))
                budget -= n
                prefill_chunks.append((gen, n))
        if batch.n_tokens == 0:
            return
        t0 = time.perf_counter()
        try:
            self._ctx.decode()
        except EngineError as exc:
            logger.error("%s; failing the %d requests in the batch", exc, len(running))
            for gen in running:
                self._memory.reset(gen.slot)
                gen.fail(exc)
            return
        t1 = time.perf_counter()
        self._stats.n_decode_calls += 1
        self._stats.n_busy_slots_sum += len(running)
        logger.debug("step: %d tokens (%d sequences) in %.1f ms", batch.n_tokens, len(running), 1e3 * (t1 - t0))
        for gen, n in prefill_chunks:
            self.after_prompt_chunk(gen, n, t1)
        for gen in running:
            if gen.pending_token is not None and gen.batch_index >= 0:
                gen.slot.tokens.append(gen.pending_token)
            if gen.batch_index >= 0 and not gen.done:
                gen.sample(self._ctx)

    def _add_prompt_chunk(self, gen: Generation, room: int) -> int:
        """Add up to ``room`` prompt tokens, stopping at the next checkpoint position."""
        done = len(gen.slot.tokens)
        end = gen.checkpoints_due[0][0] if gen.checkpoints_due else len(gen.prompt)
        n = min(end - done, room)
        wants_logits = done + n == len(gen.prompt) and gen.request.max_tokens != 0
        index = self._ctx.batch.add(gen.prompt[done : done + n], done, gen.slot.id, wants_logits)
        if wants_logits:
            gen.batch_index = index
        return n

    def after_prompt_chunk(self, gen: Generation, n: int, now: float) -> None:
        """``n`` more prompt tokens are in the slot's memory: checkpoint where due, and note the prompt's end.

        ``n`` is 0 for a prompt that was all cached.
        """
        slot = gen.slot
        done = len(slot.tokens)
        slot.tokens.extend(gen.prompt[done : done + n])
        if gen.checkpoints_due and gen.checkpoints_due[0][0] == len(slot.tokens):
            _, boundary = gen.checkpoints_due.pop(0)
            self._memory.checkpoint(slot, boundary=boundary)
        if len(slot.tokens) != len(gen.prompt):
            return
        if n > 0 and not self._memory.can_truncate:
            # The end of the prompt, with its logits: the same prompt again (a regenerated reply) samples at
            # once, and no prefill is split before its last token for the sake of a checkpoint.
            logits = self._ctx.logits(gen.batch_index).tobytes() if gen.batch_index >= 0 else None
            self._memory.checkpoint(slot, boundary=False, logits=logits)
        gen.prompt_done(now)
