"""``draft-simple``: a smaller model of the same vocabulary guesses the next tokens, greedily.

llama-server's ``common_speculative_impl_draft_simple``: the draft model's context holds each slot's tokens
too (one sequence per slot), and a step's drafts are decoded together, one token per slot per draft
decode, each the draft model's most likely token, until ``n_max`` tokens or one below ``p_min`` (its
probability among the top 10, as llama-server's top-k sampler sees it). Instead of mirroring every batch
the target decodes, the draft context catches up lazily: before drafting, a slot's sequence is cut back
to what it shares with the slot's tokens (the draft's rejected guesses, another request's prompt) and the
rest is decoded, so prompt-cache hits, restored slots and rollbacks need no bookkeeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import EngineError
from ...llama.context import KvCache, NativeContext
from ...llama.model import NativeModel
from ...llama.threadpool import PoolPlacement

#: llama-server's draft sampler: top-k 10, whose softmax gives the probability ``p_min`` is compared with.
TOP_K = 10
#: llama.cpp's ``SPEC_VOCAB_MAX_SIZE_DIFFERENCE`` and ``SPEC_VOCAB_CHECK_START_TOKEN_ID``.
MAX_VOCAB_DIFFERENCE = 128
FIRST_CHECKED_TOKEN = 5
#: The per-token states a recurrent draft model keeps for rolling back (24 overflowed LFM2-350M's graph).
MAX_ROLLBACK = 16


def vocab_mismatch(target: NativeModel, draft: NativeModel) -> str | None:
    """Why ``draft`` cannot draft for ``target`` (``common_speculative_are_compatible``), or None."""
    if target.info.vocab_type_name != draft.info.vocab_type_name:
        return "the draft model's vocabulary type differs from the target model's"
    if (target.bos_id, target.eos_id) != (draft.bos_id, draft.eos_id):
        return "the draft model's BOS/EOS tokens differ from the target model's"
    if abs(target.n_vocab - draft.n_vocab) > MAX_VOCAB_DIFFERENCE:
        return (
            f"the vocabularies differ in size by more than {MAX_VOCAB_DIFFERENCE} ({target.n_vocab} vs {draft.n_vocab})"
        )
    n = min(target.n_vocab, draft.n_vocab)
    target_pieces, draft_pieces = target.all_pieces(), draft.all_pieces()
    for token in range(FIRST_CHECKED_TOKEN, n):
        if target_pieces[token] != draft_pieces[token]:
            return f"token {token} differs between the target and the draft model"
    return None


@dataclass(frozen=True, slots=True)
class DraftRequest:
    """One slot's request for a draft: its tokens in memory, the token just sampled, the most to draft, and
    the tokens the request never samples (guessing one would waste the rest of the draft)."""

    slot: int
    tokens: Sequence[int]
    sampled: int
    limit: int
    banned: frozenset[int] = frozenset()


class DraftModel:
    """The draft model and its context (one sequence per slot), owned from here on."""

    def __init__(
        self,
        target: NativeModel,
        model: NativeModel,
        *,
        n_ctx: int,
        n_batch: int,
        n_slots: int,
        n_threads: int,
        n_max: int,
        p_min: float,
        n_threads_batch: int | None = None,
        kv: KvCache | None = None,
        placement: PoolPlacement | None = None,
        placement_batch: PoolPlacement | None = None,
    ) -> None:
        """``placement`` / ``placement_batch``: where its threads run (``-Cd``, ``--prio-draft`` and the rest, and
        their batch forms; None: ggml's default placement)."""
        problem = vocab_mismatch(target, model)
        if problem is not None:
            model.close()  # handed over to this class, which will not keep it
            raise EngineError(f"draft model {model.path} cannot draft for {target.path}: {problem}")
        self.model = model
        try:
            self._ctx = NativeContext(
                model,
                n_ctx=n_ctx,
                n_batch=n_batch,
                n_ubatch=n_batch,
                n_seq_max=n_slots,
                n_threads=n_threads,
                n_threads_batch=n_threads if n_threads_batch is None else n_threads_batch,
                kv=kv,
                # Its rejected guesses are rolled back through kept states (at most n_max of them; past 16 LFM2's
                # graph overflows, and a failed rollback empties the sequence, which catches up again).
                n_rollback=min(n_max, MAX_ROLLBACK),
            )
        except BaseException:
            model.close()
            raise
        if placement is not None:
            try:
                self._ctx.place_threads(placement, placement_batch or placement)
            except BaseException:
                self.close()
                raise
        self._n_max = n_max
        self._p_min = p_min
        #: What each sequence of the draft context holds.
        self._held: list[list[int]] = [[] for _ in range(n_slots)]

    def draft(self, requests: Sequence[DraftRequest]) -> list[list[int]]:
        """Each request's draft (at most its ``limit`` and ``n_max``), decoded together."""
        ctx, batch = self._ctx, self._ctx.batch
        for r in requests:
            self._catch_up(r.slot, r.tokens, keep=batch.capacity // len(requests) - 1)
        batch.clear()
        drafts: list[list[int]] = [[] for _ in requests]
        rows: dict[int, int] = {}  # request -> its logits row in the batch just decoded
        for i, r in enumerate(requests):
            held = self._held[r.slot]
            tail = [*r.tokens[len(held) :], r.sampled]
            rows[i] = batch.add(tail, len(held), r.slot, True)
            held.extend(tail)
        while rows:
            ctx.decode(batch)
            batch.clear()
            decoded, rows = rows, {}
            for i, row in decoded.items():
                r, draft = requests[i], drafts[i]
                token, p = self._best(row, r.banned)
                if p < self._p_min:
                    continue
                draft.append(token)
                if len(draft) < min(r.limit, self._n_max):
                    held = self._held[r.slot]
                    rows[i] = batch.add((token,), len(held), r.slot, True)
                    held.append(token)
        return drafts

    def _catch_up(self, slot: int, tokens: Sequence[int], *, keep: int) -> None:
        """Cut the sequence back to what it shares with ``tokens``, and decode all but the last ``keep`` of
        the rest (those go in the drafting batch)."""
        held = self._held[slot]
        shared = 0
        for a, b in zip(held, tokens, strict=False):
            if a != b:
                break
            shared += 1
        if shared < len(held):
            if not self._ctx.seq_rm(slot, shared, -1):  # more than its recurrent state rolls back by
                self._ctx.seq_clear(slot)
                shared = 0
            del held[shared:]
        batch = self._ctx.batch
        while len(tokens) - len(held) > max(keep, 0):
            chunk = tokens[len(held) : min(len(tokens) - max(keep, 0), len(held) + batch.capacity)]
            batch.clear()
            batch.add(chunk, len(held), slot, False)
            self._ctx.decode(batch)
            held.extend(chunk)

    def _best(self, row: int, banned: frozenset[int]) -> tuple[int, float]:
        """The most likely token at ``row`` of the last decode but ``banned``, and its probability among the
        top ``TOP_K``."""
        logits = self._ctx.logits(row)
        if banned:
            logits = logits.copy()
            logits[list(banned)] = -np.inf
        best = int(np.argmax(logits))
        top = np.partition(logits, -TOP_K)[-TOP_K:] if len(logits) > TOP_K else logits
        return best, float(1.0 / np.sum(np.exp(top - logits[best])))

    def forget(self) -> None:
        """Empty every sequence (after a failed decode, what they hold is unknown)."""
        for slot, held in enumerate(self._held):
            self._ctx.seq_clear(slot)
            held.clear()

    def close(self) -> None:
        """Free the context, then the model (this class owns both)."""
        self._ctx.close()
        self.model.close()
