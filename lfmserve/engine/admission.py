"""Starting a waiting request: its slot, the cached prefix it reuses, its sampler and where it checkpoints.

``place`` picks a slot (``scheduler.choose_slot``) and the longest prefix the prompt can reuse exactly
(:meth:`SlotMemory.plan`), or says to wait while another slot is still computing a prefix the two
prompts share (computed once, then copied). ``start`` brings the slot's memory to that prefix, parks
the idle slots in RAM, and begins the generation; a prompt that was all cached samples at once from the
logits kept with it. Engine-thread only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from ..llama.context import NativeContext
from ..llama.model import NativeModel
from .adapters import Adapters
from .generation import Generation, Limits, Submission
from .media import media_ends
from .memory import SlotMemory
from .records import EngineConfig, EngineRequest, EngineStats
from .sampling import Sampler
from .scheduler import ReusePlan, Slot, checkpoint_positions, choose_slot, common_prefix_length
from .step import BatchStep

logger = logging.getLogger(__name__)

#: A request waits for another slot to finish computing a prefix they share when it is this much longer
#: than what the request could reuse now.
SHARED_PREFIX_WAIT = 64


class Admission:
    """Turns a waiting request into a running generation, once a slot and a reuse plan are found for it.

    It is split from the engine's loop so that the loop only decides when to start requests, and this
    class decides where each one starts and from which cached prefix.
    """

    def __init__(
        self,
        model: NativeModel,
        ctx: NativeContext,
        memory: SlotMemory,
        step: BatchStep,
        stats: EngineStats,
        config: EngineConfig,
        adapters: Adapters,
    ) -> None:
        self._model = model
        self._adapters = adapters
        self._ctx = ctx
        self._memory = memory
        self._step = step
        self._stats = stats
        self._similarity = config.slot_similarity
        self._limits = Limits(memory.n_ctx_slot, model.eog_tokens, context_shift=memory.shifts_context)
        newline = model.tokenize("\n", add_special=False, parse_special=False)
        self._newline = newline[0] if len(newline) == 1 else None

    def place(self, request: EngineRequest, running: Iterable[Generation]) -> tuple[Slot, ReusePlan] | None:
        """The slot and reuse plan for ``request``, or None while it has to wait."""
        prompt = request.prompt_tokens
        slot = choose_slot(self._memory.slots, prompt, request.id_slot, self._similarity)
        if slot is None:
            return None
        adapters = self._adapters.scales_of(request.lora)
        needs_logits = request.max_tokens != 0
        plan = self._memory.plan(
            slot, prompt, cache_prompt=request.cache_prompt, needs_logits=needs_logits, adapters=adapters
        )
        if request.cache_prompt:
            for other in running:
                if other.prefilling and other.slot.adapters == adapters:
                    shared = common_prefix_length(other.prompt, prompt)
                    if shared > max(plan.keep, len(other.slot.tokens)) + SHARED_PREFIX_WAIT:
                        return None  # compute the shared prefix once: wait for it, then copy it
        return slot, plan

    def start(self, submission: Submission, slot: Slot, plan: ReusePlan, running: dict[int, Generation]) -> None:
        """Begin ``submission`` in ``slot`` from the plan's prefix, as a generation in ``running``."""
        request = submission.request
        adapters = self._adapters.scales_of(request.lora)
        self._memory.prepare(slot, plan, request.prompt_tokens, needs_logits=request.max_tokens != 0, adapters=adapters)
        slot.busy = True
        self._memory.park_idle()
        sampler = Sampler(
            self._model,
            request.sampling,
            request.prompt_tokens,
            self._memory.n_ctx_slot,
            constraint=request.constraint,
            n_probs=request.n_probs,
            post_sampling=request.post_sampling_probs,
        )
        gen = Generation(submission, slot, sampler, limits=self._limits, piece=self._pieces(request), stats=self._stats)
        running[gen.id] = gen
        if gen.n_cached:
            self._stats.n_cache_hits += 1
            self._stats.n_cached_tokens += gen.n_cached
        if not self._memory.can_truncate:
            if gen.n_cached and all(c.n_tokens != gen.n_cached for c in slot.checkpoints):
                # Free (no decode call): the memory is exact where prefilling starts, typically the end of
                # the previous reply, so an edit of the message that follows needs nothing recomputed before it.
                self._memory.checkpoint(slot, boundary=False)
            gen.checkpoints_due = checkpoint_positions(
                gen.prompt,
                gen.n_cached,
                turn_ends=self._model.eog_tokens,
                newline=self._newline,
                media_ends=media_ends(request.media),
            )
        gen.t_prompt_start = time.perf_counter()  # the prompt's time counts from here, its memory prepared
        gen.report_progress(gen.t_prompt_start)
        logger.debug(
            "request %d: slot %d, prompt %d tokens, %d reused (%s)",
            gen.id,
            slot.id,
            len(gen.prompt),
            gen.n_cached,
            plan.source,
        )
        if len(slot.tokens) == len(gen.prompt):  # all cached: prefill-only, or the logits were kept
            self._step.after_prompt_chunk(gen, 0, gen.t_prompt_start)
            if not gen.done:
                assert plan.checkpoint is not None
                gen.sample(self._ctx, plan.checkpoint.logits_row())

    def _pieces(self, request: EngineRequest) -> Callable[[int], bytes]:
        """A token's text as the output shows it: special tokens empty, except those the request keeps."""
        to_piece = self._model.token_to_piece
        keep = request.keep_special
        if not keep:
            return to_piece
        return lambda token: to_piece(token, special=token in keep)
