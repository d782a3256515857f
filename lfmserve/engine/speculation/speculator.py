"""Each step's drafts: which drafter guesses for each generation, and how much of the guess is verified.

For every generation about to decode its pending token, the drafters of ``--spec-type`` are asked in
llama-server's order until one guesses; ``draft-simple``'s model is asked last, for all the generations the
n-gram drafters had nothing for, in one batch. A guess is cut to what the request allows (``speculative``,
``speculative.n_max``, ``n_predict``), the server's draft size, what fits the batch and the slot, and what
the grammar allows (llguidance checks it without advancing). What is left is verified only as far as it
is worth it (:mod:`.worth`); an unverified guess is compared with the tokens then sampled instead,
so the slot's acceptance is measured either way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from ...errors import EngineError
from ...llama.context import NativeContext
from .config import SPEC_TYPES, SpeculationConfig
from .costs import CostMeter, Remeasurement
from .draft_model import DraftModel, DraftRequest
from .ngram import Drafter, NgramMap, NgramSimple
from .ngram_cache import NgramCache
from .ngram_mod import NgramMod, NgramModTable
from .worth import LINEAR_COSTS, Acceptance, BatchCosts, best_draft_length, expected_kept

logger = logging.getLogger(__name__)


class _Constraint(Protocol):
    def allowed_prefix(self, tokens: Sequence[int]) -> int: ...


class _DraftedRequest(Protocol):
    @property
    def max_tokens(self) -> int: ...
    @property
    def draft_max(self) -> int | None: ...
    @property
    def media(self) -> Sequence[object]: ...
    @property
    def constraint(self) -> _Constraint | None: ...


class _Slot(Protocol):
    @property
    def id(self) -> int: ...


class _IdleSlot(_Slot, Protocol):
    busy: bool

    @property
    def tokens(self) -> Sequence[int]: ...


class Generation(Protocol):
    """What the speculator reads and sets of a generation (:class:`lfmserve.engine.generation.Generation`): the
    seam keeps this package below the generation that uses it."""

    pending_token: int | None
    replay: tuple[int, ...]
    n_decoded: int
    draft: tuple[int, ...]
    draft_source: Drafter | None
    drafters: list[Drafter] | None
    acceptance: Acceptance
    draft_acceptance: Acceptance

    @property
    def request(self) -> _DraftedRequest: ...
    @property
    def slot(self) -> _Slot: ...
    @property
    def history(self) -> list[int]: ...
    @property
    def banned_tokens(self) -> frozenset[int]: ...
    def matched_unverified(self, acceptance: Acceptance) -> int: ...
    def leave_unverified(self, draft: tuple[int, ...], acceptance: Acceptance) -> None: ...
    def drop_unverified(self) -> None: ...


class Speculator:
    def __init__(
        self,
        config: SpeculationConfig,
        *,
        n_ctx_slot: int,
        draft_model: DraftModel | None = None,
        costs: BatchCosts = LINEAR_COSTS,
        meter: CostMeter | None = None,
        measure_again: Callable[[], CostMeter] | None = None,
        exact_batch: int | None = None,
    ) -> None:
        """``costs``: what a decode of n tokens costs here (:func:`.costs.measure_batch_costs`), until ``meter``
        has measured them between requests (:meth:`measure_idle`); ``measure_again`` makes the meter of a later
        measurement (none: no other). ``exact_batch``: the most tokens a decode computes as single decodes
        (:func:`.exactness.exact_batch_size`), which a generation's replayed tokens, pending token and draft then
        never exceed (None: no such bound)."""
        self._config = config
        self._costs = costs
        self._meter = meter
        self._again = Remeasurement(measure_again if meter is not None else None)
        #: Whether the costs were measured on one thread of several (None: not measured between requests).
        self._costs_on_one_thread: bool | None = None
        self._exact_batch = exact_batch
        self._n_ctx_slot = n_ctx_slot
        self._mod_table = NgramModTable(config.ngram_mod) if "ngram-mod" in config.types else None
        self._draft_model = draft_model
        #: ``--spec-synth-rates``: drafts are verified whole and kept by chance (a benchmark of acceptance).
        self.synth_rates = config.synth_rates

    def _drafters(self, gen: Generation) -> list[Drafter]:
        """The generation's n-gram drafters, in llama-server's order (made at its first draft)."""
        if gen.drafters is None:
            config, made = self._config, list[Drafter]()
            for kind in (t for t in SPEC_TYPES if t in config.types):
                if kind == "ngram-simple":
                    made.append(NgramSimple(config.ngram_simple))
                elif kind == "ngram-map-k":
                    made.append(NgramMap(config.ngram_map_k, key_only=True))
                elif kind == "ngram-map-k4v":
                    made.append(NgramMap(config.ngram_map_k4v, key_only=False))
                elif kind == "ngram-mod" and self._mod_table is not None:
                    made.append(NgramMod(self._mod_table, config.ngram_mod))
                elif kind == "ngram-cache":
                    made.append(NgramCache())
            gen.drafters = made
        return gen.drafters

    def plan(self, generating: Sequence[Generation], capacity: int) -> None:
        """Set ``draft`` of each generation (each decodes its pending token, and the draft after it)."""
        plan = _StepPlan(streams=float(len(generating)), tokens=sum(1 + len(g.replay) for g in generating))
        for_model: list[tuple[Generation, int]] = []
        for gen in generating:
            gen.draft, gen.draft_source = (), None
            limit = self._limit(gen, capacity - plan.tokens)
            if limit <= 0:
                continue
            assert gen.pending_token is not None
            for drafter in self._drafters(gen):
                guess = drafter.draft(gen.history, gen.pending_token)[:limit]
                if guess:
                    self._choose(gen, guess, drafter, plan)
                    break
            else:
                if self._draft_model is not None and not gen.request.media:
                    # Only as many guesses as are worth verifying (one at least, to keep measuring): a guess
                    # cut after drafting would roll the draft context back, which llama.cpp's recurrent
                    # rollback gets wrong (drafts kept fell from 100 % to 6 % on the tiny LFM2).
                    worth = (
                        limit
                        if self.synth_rates
                        else best_draft_length(
                            gen.acceptance.q, limit, streams=plan.streams, batch=plan.tokens, costs=self._costs
                        )
                    )
                    for_model.append((gen, max(worth, 1)))
        if for_model:
            self._ask_model(for_model, capacity, plan)

    def _ask_model(self, waiting: list[tuple[Generation, int]], capacity: int, plan: _StepPlan) -> None:
        assert self._draft_model is not None
        requests = []
        for gen, limit in waiting:
            assert gen.pending_token is not None
            requests.append(DraftRequest(gen.slot.id, gen.history, gen.pending_token, limit, gen.banned_tokens))
        try:
            guesses = self._draft_model.draft(requests)
        except EngineError as exc:  # the draft model's own failure: the step goes on without its drafts
            logger.error("draft model: %s; drafting nothing this step", exc)
            self._draft_model.forget()
            return
        for (gen, _), guess in zip(waiting, guesses, strict=True):
            guess = guess[: max(capacity - plan.tokens, 0)]
            if guess:
                self._choose(gen, guess, None, plan)

    def _limit(self, gen: Generation, room: int) -> int:
        """The longest draft the server, the request, the batch and the slot allow."""
        request = gen.request
        limit = self._config.max_draft
        if request.draft_max is not None:
            limit = min(limit, request.draft_max)
        remaining = request.max_tokens - gen.n_decoded - 1 if request.max_tokens > 0 else limit
        if self._exact_batch is not None:
            limit = min(limit, self._exact_batch - 1 - len(gen.replay))
        return min(limit, room, remaining, self._n_ctx_slot - len(gen.history) - 2)

    def _choose(self, gen: Generation, guess: list[int], drafter: Drafter | None, plan: _StepPlan) -> None:
        """Verify as much of ``guess`` as the grammar allows and is worth it; leave the rest unverified."""
        constraint = gen.request.constraint
        if constraint is not None:
            guess = guess[: constraint.allowed_prefix(guess)]  # the grammar (past the pending token) forbids the rest
        own = drafter.own_acceptance if drafter is not None else None
        acceptance = gen.acceptance if own is None else own
        # A guess like one still being compared, and right so far, is judged with those tokens counted: a copy
        # the drafter found is verified once it has been right for a few tokens, not once it has ended.
        q = acceptance.q_with(gen.matched_unverified(acceptance))
        worth = best_draft_length(q, len(guess), streams=plan.streams, batch=plan.tokens, costs=self._costs)
        if self.synth_rates:
            worth = len(guess)
        if worth < max(self._config.n_min, 1):
            gen.leave_unverified(tuple(guess), acceptance)  # compared with the tokens sampled instead
            return
        gen.drop_unverified()
        gen.draft, gen.draft_source, gen.draft_acceptance = tuple(guess[:worth]), drafter, acceptance
        plan.streams += expected_kept(q, worth)
        plan.tokens += worth

    def measure_idle(self, ctx: NativeContext, slots: Sequence[_IdleSlot], *, single_decodes_on: int | None) -> bool:
        """While no request runs: one decode of the cost measurement on an empty slot's sequence (none empty: not
        now, and a server whose every slot holds a prompt measures no more); whether more are due.

        ``single_decodes_on``: the thread tuner's count for single decodes (None: not chosen yet). Once the machine
        has changed since the costs were measured, they are measured again (:class:`.costs.Remeasurement`); such a
        measurement's costs replace the ones in use only when it ends, so a failure leaves those as they were.
        """
        free = next((slot.id for slot in slots if not slot.busy and not slot.tokens), None)
        if free is None:
            return False
        meter = self._meter or self._again.due(single_decodes_on)
        if meter is None:
            return False
        self._meter = meter
        try:
            costs = meter.step(ctx, free)
        except Exception:  # measuring only tunes drafting: its failure may not end the engine's thread
            logger.exception("speculation: measuring what a batch costs failed; the costs so far stand")
            self._meter = None
            self._again.failed()
            return False
        if costs is not None and (meter.done or self._costs_on_one_thread is None):
            self._costs = costs
        if meter.done:
            self._costs_on_one_thread = meter.one_thread
            self._again.measured(meter, ctx.n_threads, single_decodes_on)
            self._meter = None
        return self._meter is not None

    def observe(self, ctx: NativeContext, threads: int, seconds: float) -> None:
        """The generations' decode in ``ctx.batch`` took ``seconds`` on ``threads``. When every position asked for
        logits, as a verified draft's do, and it ran on the threads the costs were measured on (all of them, or one
        beside busy processes), its time refines the measured costs (:meth:`.worth.BatchCosts.refined`): figures
        measured between requests while the machine was busy elsewhere come back to what it does now. A single
        decode much faster than when they were measured has them measured again (:class:`.costs.Remeasurement`).
        Not while the measurement runs: its figures stand."""
        batch = ctx.batch
        n = batch.n_tokens
        measured_on = 1 if self._costs_on_one_thread else (ctx.n_threads if n == 1 else ctx.n_threads_batch)
        if self._meter is not None or threads != measured_on:
            return
        if n == 1:
            self._again.decoded_single(seconds)
        if batch.logits[:n].all() and (refined := self._costs.refined(n, seconds)) is not None:
            logger.debug("speculation: a decode of %d tokens took %.1f ms, the fastest yet", n, seconds * 1e3)
            self._costs = refined

    @staticmethod
    def verified(gen: Generation, accepted: int) -> None:
        """``accepted`` of the generation's draft were kept: its drafter learns from that."""
        gen.draft_acceptance.update(accepted, cut_short=accepted < len(gen.draft))
        if gen.draft_source is not None:
            gen.draft_source.accept(accepted)

    def close(self) -> None:
        if self._draft_model is not None:
            self._draft_model.close()


class _StepPlan:
    """The batch so far: its tokens, and the tokens its step is expected to yield."""

    __slots__ = ("streams", "tokens")

    def __init__(self, *, streams: float, tokens: int) -> None:
        self.streams = streams
        self.tokens = tokens
