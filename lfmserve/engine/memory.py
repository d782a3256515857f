"""What each slot's memory holds, and every way a request changes it: reuse plans, checkpoints, RAM parking,
KV and context shifting (the ``/slots`` commands and slot files are :mod:`~lfmserve.engine.slot_control`'s).

The slots are sequences of one shared llama context. A request starts from the longest prefix it can
reuse exactly (``scheduler.plan_reuse``): its own slot's memory, another slot's (the KV cells are
shared, the recurrent / sliding-window state comes from a checkpoint), or a sequence parked in host
RAM. This class applies such plans, saves the checkpoints that make them exact, and moves idle slots
to RAM. Engine-thread only (``/slots`` reads the slots' fields as they stand).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from ..errors import EngineError
from ..llama.context import NativeContext
from .disk_cache import DiskPromptCache
from .prompt_cache import RamPromptCache
from .records import EngineConfig, EngineRequest, EngineStats
from .scheduler import CachedSequence, Checkpoint, ReusePlan, Slot, common_prefix_length, plan_reuse, shifted_chunks

logger = logging.getLogger(__name__)

#: Shorter sequences are not worth a place in the RAM cache.
MIN_RAM_TOKENS = 32


class SlotMemory:
    """The slots of the shared llama context, brought to each request's reuse plan.

    Reuse plans, checkpoints, RAM parking and shifts all go through this one object, so that a slot's
    tokens and checkpoints always describe what its sequence in the context holds.
    """

    def __init__(
        self,
        ctx: NativeContext,
        config: EngineConfig,
        stats: EngineStats,
        *,
        exact_truncation: bool,
        disk: DiskPromptCache | None = None,
    ) -> None:
        self._ctx = ctx
        self._config = config
        self._stats = stats
        #: Each slot's limit: its share of the context, as llama-server's -np; with ``--kv-unified`` the whole
        #: context, which the slots share (a decode that finds no room fails every generation in it).
        self.n_ctx_slot: int = config.context_sizes(ctx.model.info.n_ctx_train).n_ctx_slot
        self.slots = tuple(Slot(i, n_ctx=self.n_ctx_slot) for i in range(config.n_slots))
        self.ram = RamPromptCache(config.cache_ram_bytes)
        #: ``--cache-disk``: the RAM cache's entries are written there too, and read back now.
        self.disk = disk
        if disk is not None:
            # Only what the RAM cache holds is read, oldest first so that the newest are the last to go.
            loaded = [entry for entry in reversed(disk.load(max_bytes=self.ram.max_bytes)) if self.ram.put(entry)]
            logger.info("prompt cache: %d entries read from %s", len(loaded), disk.folder)
        #: The memory can drop a sequence's tail by position (no recurrent state, no sliding window).
        self.can_truncate = exact_truncation
        #: ``--cache-reuse`` applies to attention-only models whose memory can shift (not hybrid or SWA ones).
        self.shifts_kv = config.cache_reuse > 0 and exact_truncation and ctx.can_shift
        #: ``--context-shift``, on the same models (the engine turns it off beside a projector, as llama-server).
        self.shifts_context = config.context_shift and exact_truncation and ctx.can_shift
        if config.context_shift and not self.shifts_context:
            logger.warning("--context-shift is not supported by this model's memory: it is off")
        if config.cache_idle_slots and self.ram.max_bytes > 0:
            # llama-server's log line, tag included: its test suite looks for it.
            logger.debug("idle slots go to the RAM cache when a request starts (__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__)")

    # -- starting a request ----------------------------------------------------------------------
    def plan(
        self, slot: Slot, prompt: Sequence[int], *, cache_prompt: bool, needs_logits: bool, adapters: tuple[float, ...]
    ) -> ReusePlan:
        """The longest cached prefix ``prompt`` can start from in ``slot``, computed under the LoRA ``adapters``."""
        return plan_reuse(
            slot,
            prompt,
            others=[s for s in self.slots if s is not slot and s.tokens],
            ram=self.ram.entries,
            cache_prompt=cache_prompt,
            needs_logits=needs_logits,
            can_truncate=self.can_truncate,
            adapters=adapters,
        )

    def prepare(
        self, slot: Slot, plan: ReusePlan, prompt: tuple[int, ...], *, needs_logits: bool, adapters: tuple[float, ...]
    ) -> None:
        """Bring the slot's memory to the plan's prefix of ``prompt`` (KV-shifting repeated runs in, if on), to be
        continued under the LoRA ``adapters``."""
        if plan.keep < len(slot.tokens) / 2:  # most of the slot's cache is about to go (llama-server's rule)
            self._save_to_ram(slot)
        if self.shifts_kv and plan.source in ("own", "ram"):
            if plan.ram_entry is not None:  # the whole parked sequence back first, then shift within it
                self._apply(slot, replace(plan, keep=len(plan.ram_entry.tokens)))
                plan = ReusePlan("own", plan.keep)
            plan = replace(plan, keep=self._shift_cached_chunks(slot, prompt, plan.keep, needs_logits))
        self._apply(slot, plan)
        slot.adapters = adapters

    def _apply(self, slot: Slot, plan: ReusePlan) -> None:
        """Bring the slot's memory to the plan's prefix."""
        if plan.source == "none":
            self.reset(slot)
            return
        if plan.source == "slot":
            source = plan.source_slot
            assert source is not None
            self.reset(slot)
            self._ctx.seq_cp(source.id, slot.id, plan.keep)
            slot.tokens = source.tokens[: plan.keep]
            slot.checkpoints = [c for c in source.checkpoints if c.n_tokens <= plan.keep]
            self._stats.n_slot_copies += 1
        elif plan.source == "ram":
            entry = plan.ram_entry
            assert entry is not None
            logger.debug("slot %d: updating prompt cache: %d tokens back from RAM", slot.id, plan.keep)
            self.reset(slot)
            self._ctx.set_state(slot.id, entry.state, partial=False)
            slot.tokens = list(entry.tokens)
            slot.checkpoints = list(entry.checkpoints)
            self.ram.touch(entry)
            self._stats.n_ram_restores += 1
        if plan.checkpoint is not None:
            self._ctx.set_state(slot.id, plan.checkpoint.state, partial=True)
            self._stats.n_checkpoints_restored += 1
        if len(slot.tokens) > plan.keep:
            self._truncate(slot, plan.keep)

    def _shift_cached_chunks(self, slot: Slot, prompt: tuple[int, ...], keep: int, needs_logits: bool) -> int:
        """``--cache-reuse``: move the cached runs the prompt repeats after its common prefix into place.

        Returns the longer prefix the slot's memory now holds. Attention-only models only: the moved
        keys are re-rotated to their new positions, an approximation llama-server makes too (the moved
        tokens were computed after other context).
        """
        n_past = keep
        for shift in shifted_chunks(slot.tokens, prompt, keep, self._config.cache_reuse):
            self._ctx.seq_rm(slot.id, shift.target, shift.source)
            self._ctx.seq_shift(slot.id, shift.source, shift.source + shift.n, shift.target - shift.source)
            n_past = shift.target + shift.n
        n_past = min(n_past, len(prompt) - 1 if needs_logits else len(prompt))
        if n_past > keep:
            slot.tokens = list(prompt[:n_past])
            self._truncate(slot, n_past)
            self._stats.n_shifted_tokens += n_past - keep
        return n_past

    def shift_context(self, slot: Slot, request: EngineRequest) -> int:
        """``--context-shift``: keep the BOS (which attention leans on) and the request's ``n_keep`` tokens after
        it (-1: its whole prompt), drop its ``n_discard`` of those that follow (0: half), and move the rest back;
        returns how many were dropped.

        llama-server's rule: the kept keys are re-rotated to their new positions, an approximation (they were
        computed after the dropped ones).
        """
        kept = len(request.prompt_tokens) if request.n_keep < 0 else request.n_keep
        n_keep = min(self.n_ctx_slot - 4, kept + (1 if self._ctx.model.info.add_bos else 0))
        n_left = len(slot.tokens) - n_keep
        n_discard = max(0, min(request.n_discard or n_left // 2, n_left - 1))
        if not self._ctx.seq_rm(slot.id, n_keep, n_keep + n_discard):
            raise EngineError(f"could not shift the context of slot {slot.id}")
        self._ctx.seq_shift(slot.id, n_keep + n_discard, len(slot.tokens), -n_discard)
        del slot.tokens[n_keep : n_keep + n_discard]
        slot.checkpoints = []
        self._stats.n_context_shifts += 1
        return n_discard

    def _truncate(self, slot: Slot, n_tokens: int) -> None:
        if not self._ctx.seq_rm(slot.id, n_tokens, -1):
            raise EngineError(f"could not truncate slot {slot.id} to {n_tokens} tokens")
        slot.truncate(n_tokens)

    # -- checkpoints and host RAM -----------------------------------------------------------------
    def checkpoint(self, slot: Slot, *, boundary: bool, logits: bytes | None = None) -> None:
        """Save the slot's recurrent / sliding-window state as it stands (after all its tokens)."""
        state = self._ctx.get_state(slot.id, partial=True)
        slot.add_checkpoint(
            Checkpoint(len(slot.tokens), state, boundary, logits),
            max_count=self._config.max_checkpoints,
            max_bytes=self._config.max_checkpoint_bytes,
        )
        self._stats.n_checkpoints_saved += 1

    def park_idle(self) -> None:
        """Move the idle slots' sequences to host RAM, so that the KV cache holds only running ones.

        Attention reads every used cell of the unified cache, whichever sequence it belongs to: 2,000
        idle cells slow single-stream decoding from 125 to 95 tok/s on LFM2-350M (llama-bench at that
        depth). llama-server clears idle slots the same way (``--cache-idle-slots``). A parked
        sequence comes back from RAM with one copy; one that RAM cannot take (no RAM cache, or bigger than
        all of it) stays where it is rather than be lost.
        """
        if not self._config.cache_idle_slots:
            return
        for slot in self.slots:
            if slot.busy or not slot.tokens:
                continue
            kept = self._save_to_ram(slot)
            if kept == "saved":
                # llama-server's log line, tag included: its test suite looks for it.
                logger.debug("slot %d: idle, saved to the RAM cache (__TEST_TAG_CACHE_IDLE_SLOT__)", slot.id)
            if kept != "refused":
                self.reset(slot)

    def _save_to_ram(self, slot: Slot) -> Literal["saved", "needless", "refused"]:
        """Keep a slot's sequence in host RAM before its memory is replaced, if it is worth keeping.

        ``needless``: too short to matter, or held already (by RAM or another slot); ``refused``: worth
        keeping, but the RAM cache cannot take it (off, or too big).
        """
        if len(slot.tokens) < MIN_RAM_TOKENS or self.ram.covers(slot.tokens, slot.adapters):
            return "needless"
        if any(o is not slot and _holds(o, slot) for o in self.slots):
            return "needless"  # another slot holds it all
        if self.ram.max_bytes <= 0:
            return "refused"
        entry = self._sequence(slot)
        if not self.ram.put(entry):
            return "refused"
        if self.disk is not None:
            self.disk.save(entry)
        self._stats.n_ram_saves += 1
        logger.debug("slot %d: %d tokens kept in RAM (%.1f MiB)", slot.id, len(slot.tokens), entry.n_bytes / 2**20)
        return "saved"

    def persist(self) -> None:
        """``--cache-disk`` at shutdown: every slot's sequence is written too (engine thread stopped, so these wait
        for the writer rather than be dropped), then the writer finishes."""
        if self.disk is None:
            return
        for slot in self.slots:
            if len(slot.tokens) >= MIN_RAM_TOKENS and not self.ram.covers(slot.tokens, slot.adapters):
                self.disk.save(self._sequence(slot), wait=True)
        self.disk.close()

    def _sequence(self, slot: Slot) -> CachedSequence:
        """The slot's whole sequence, as the RAM and disk caches keep it."""
        state = self._ctx.get_state(slot.id, partial=False)
        return CachedSequence(tuple(slot.tokens), state, tuple(slot.checkpoints), slot.adapters)

    # -- whole slots --------------------------------------------------------------------------------
    def reset(self, slot: Slot) -> None:
        """Forget the slot's memory, tokens and checkpoints."""
        self._ctx.seq_clear(slot.id)
        slot.tokens.clear()
        slot.checkpoints = []


def _holds(other: Slot, slot: Slot) -> bool:
    """Whether ``other`` holds all of ``slot``'s sequence, computed under the same LoRA scales."""
    return other.adapters == slot.adapters and common_prefix_length(other.tokens, slot.tokens) == len(slot.tokens)
