"""Each step's drafts (:class:`Speculator`) on fake generations: which drafter guesses, how the guess is cut (the
request, the batch, the slot, the grammar) and how much of it is worth verifying; and the grammar's cut on a
real vocabulary."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from lfmserve.engine.constraints import Grammars
from lfmserve.engine.speculation import Acceptance, NgramSizes, SpeculationConfig
from lfmserve.engine.speculation.draft_model import DraftModel, DraftRequest
from lfmserve.engine.speculation.ngram import Drafter, NgramSimple
from lfmserve.engine.speculation.ngram_cache import NgramCache
from lfmserve.engine.speculation.speculator import Speculator
from lfmserve.engine.speculation.worth import BatchCosts
from lfmserve.errors import EngineError
from lfmserve.llama.model import NativeModel

#: ``ngram-simple`` with 3-token look-ups finds [1, 2] + 3 at the start and guesses the 4 tokens after it.
COPYING = [9, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2]
GUESS = (4, 5, 6, 7)


class _Prefix:
    """A grammar that allows the first ``n`` tokens of any guess."""

    def __init__(self, n: int) -> None:
        self.n = n

    def allowed_prefix(self, tokens: Sequence[int]) -> int:
        return min(self.n, len(tokens))


@dataclass
class _Request:
    max_tokens: int = -1
    draft_max: int | None = None
    media: Sequence[object] = ()
    constraint: _Prefix | None = None


@dataclass
class _Slot:
    id: int = 0


@dataclass
class _Generation:
    """What the speculator reads and sets of a generation, and what it left unverified."""

    history: list[int] = field(default_factory=lambda: list(COPYING))
    pending_token: int | None = 3
    request: _Request = field(default_factory=_Request)
    slot: _Slot = field(default_factory=_Slot)
    acceptance: Acceptance = field(default_factory=Acceptance)
    replay: tuple[int, ...] = ()
    n_decoded: int = 1
    draft: tuple[int, ...] = ()
    draft_source: Drafter | None = None
    drafters: list[Drafter] | None = None
    banned_tokens: frozenset[int] = frozenset()
    unverified: list[tuple[tuple[int, ...], Acceptance]] = field(default_factory=list)
    draft_acceptance: Acceptance = field(default_factory=Acceptance)

    def matched_unverified(self, acceptance: Acceptance) -> int:
        return 0

    def leave_unverified(self, draft: tuple[int, ...], acceptance: Acceptance) -> None:
        self.unverified.append((draft, acceptance))

    def drop_unverified(self) -> None:
        self.unverified.clear()


def _speculator(
    *types: str, n_ctx_slot: int = 1024, draft_model: DraftModel | None = None, exact_batch: int | None = None
) -> Speculator:
    config = SpeculationConfig(types=types, ngram_simple=NgramSizes(size_n=3, size_m=4), draft_model="draft.gguf")
    return Speculator(config, n_ctx_slot=n_ctx_slot, draft_model=draft_model, exact_batch=exact_batch)


def test_a_generation_drafts_what_its_history_repeats_as_far_as_it_is_worth() -> None:
    gen = _Generation()
    _speculator("ngram-simple").plan([gen], capacity=64)
    # q = 0.9 (a fresh slot's prior) alone in the batch: 4 tokens for 2.2 more single decodes is the best rate.
    assert gen.draft == GUESS and isinstance(gen.draft_source, NgramSimple) and gen.unverified == []


def test_the_drafters_are_made_once_in_llama_servers_order() -> None:
    gen = _Generation(history=[1, 2], pending_token=3)  # too short for any draft
    speculator = _speculator("ngram-cache", "ngram-simple")
    speculator.plan([gen], capacity=64)
    drafters = gen.drafters
    assert drafters is not None and [type(d) for d in drafters] == [NgramSimple, NgramCache]
    speculator.plan([gen], capacity=64)
    assert gen.drafters is drafters and gen.draft == ()


@pytest.mark.parametrize(
    ("request_", "capacity", "n_ctx_slot", "draft"),
    [
        (_Request(draft_max=2), 64, 1024, (4, 5)),  # the request's ``speculative.n_max``
        (_Request(draft_max=0), 64, 1024, ()),  # speculation off for the request
        (_Request(max_tokens=3), 64, 1024, (4,)),  # 1 decoded, the pending token next: room for 1 more
        (_Request(), 3, 1024, (4, 5)),  # the batch holds the pending token: 2 places left
        (_Request(), 64, 16, (4, 5, 6)),  # 11 tokens in a 16-token slot, the pending and 2 places kept back
        (_Request(constraint=_Prefix(1)), 64, 1024, (4,)),  # the grammar allows a token of it
    ],
)
def test_a_guess_is_cut_to_what_the_request_the_batch_the_slot_and_the_grammar_allow(
    request_: _Request, capacity: int, n_ctx_slot: int, draft: tuple[int, ...]
) -> None:
    gen = _Generation(request=request_)
    _speculator("ngram-simple", n_ctx_slot=n_ctx_slot).plan([gen], capacity=capacity)
    assert gen.draft == draft


@pytest.mark.parametrize(
    ("exact_batch", "replay", "draft"),
    [
        (None, (), GUESS),  # the default, as llama-server: the whole copy, 4 tokens, verified in a batch of 5
        (3, (), (4, 5)),  # --spec-exact where batches of 3 are exact (repacked weights): 2 drafted at most
        (3, (1,), (4,)),  # a token replayed before the pending one takes a place in that batch
        (1, (), ()),  # no batch of 2 is exact: nothing drafted
    ],
)
def test_spec_exacts_batch_caps_the_draft_and_the_default_does_not(
    exact_batch: int | None, replay: tuple[int, ...], draft: tuple[int, ...]
) -> None:
    gen = _Generation(replay=replay)
    _speculator("ngram-simple", exact_batch=exact_batch).plan([gen], capacity=64)
    assert gen.draft == draft


def test_a_guess_not_worth_verifying_is_left_to_compare_with_what_is_sampled() -> None:
    gen = _Generation(acceptance=Acceptance(kept=1.0, cut=9.0))  # q = 0.1: no length pays
    _speculator("ngram-simple").plan([gen], capacity=64)
    assert gen.draft == () and gen.unverified == [(GUESS, gen.acceptance)]


def test_beside_other_streams_each_draft_is_shorter() -> None:
    """Four generations with the same guess: each draft makes the batch dearer for the ones after it (linear
    costs, q = 0.9): 3 tokens while the batch holds 4, 3 at 7, 2 at 10, 2 at 12."""
    gens = [_Generation(slot=_Slot(i)) for i in range(4)]
    _speculator("ngram-simple").plan(gens, capacity=64)
    assert [g.draft for g in gens] == [(4, 5, 6), (4, 5, 6), (4, 5), (4, 5)]


def test_what_was_kept_goes_to_the_acceptance_the_draft_was_measured_by() -> None:
    gen = _Generation()
    speculator = _speculator("ngram-simple")
    speculator.plan([gen], capacity=64)
    measured = gen.draft_acceptance
    speculator.verified(gen, 2)  # 2 of 4 kept: cut short
    assert measured.kept == pytest.approx(10.1) and measured.cut == pytest.approx(1.9)


class _Guesser(DraftModel):
    """A draft model that guesses ``guesses`` (or fails), recording what it was asked."""

    def __init__(self, guesses: list[list[int]] | None) -> None:  # no model: nothing of the parent's is used
        self.guesses = guesses
        self.asked: list[list[DraftRequest]] = []
        self.forgotten = 0

    def draft(self, requests: Sequence[DraftRequest]) -> list[list[int]]:
        self.asked.append(list(requests))
        if self.guesses is None:
            raise EngineError("draft decode failed")
        return self.guesses

    def forget(self) -> None:
        self.forgotten += 1


def test_the_draft_model_is_asked_once_for_the_generations_the_ngrams_had_nothing_for() -> None:
    guesser = _Guesser([[30, 31]])
    copying, fresh = _Generation(slot=_Slot(0)), _Generation(history=[8, 8, 8], pending_token=2, slot=_Slot(1))
    _speculator("ngram-simple", "draft-simple", draft_model=guesser).plan([copying, fresh], capacity=64)
    assert len(guesser.asked) == 1
    # Slot 1's tokens, its sampled token, and as many guesses as are worth verifying beside the first's draft of
    # 4 (q = 0.9, linear costs: 4 more in a batch of 10 yield 1.638 tokens a decode, 3 in a batch of 9 1.6378).
    assert guesser.asked[0] == [DraftRequest(1, [8, 8, 8], 2, 4, frozenset())]
    assert (copying.draft, fresh.draft, fresh.draft_source) == (GUESS, (30, 31), None)


def test_a_failing_draft_model_drafts_nothing_and_forgets_what_it_held() -> None:
    guesser = _Guesser(None)
    gen = _Generation(history=[8, 8, 8], pending_token=2)
    _speculator("draft-simple", draft_model=guesser).plan([gen], capacity=64)
    assert (gen.draft, guesser.forgotten, len(guesser.asked)) == ((), 1, 1)


def test_a_draft_is_cut_where_the_grammar_would_refuse_it(tiny_gguf: Path) -> None:
    model = NativeModel(tiny_gguf, vocab_only=True)
    try:
        mask = Grammars(model).gbnf('root ::= ("apples, " | "pears, ")+', param="grammar")
        good = model.tokenize("apples, pears, apples, ", add_special=False, parse_special=False)
        bad = model.tokenize("apples, plums, ", add_special=False, parse_special=False)
        assert mask.allowed_prefix(good) == len(good)
        # "apples, p" is allowed, then "l" is not ("pears" needs "e"); and checking advanced nothing.
        assert bad[: mask.allowed_prefix(bad)] == model.tokenize("apples, p", add_special=False, parse_special=False)
        assert mask.allowed_prefix(good) == len(good)
        mask.accept(good[0])
        assert mask.allowed_prefix(good[1:]) == len(good) - 1
    finally:
        model.close()


@dataclass
class _IdleSlot:
    id: int
    busy: bool = False
    tokens: list[int] = field(default_factory=list)


#: A context of two threads, as the speculator reads one between requests.
_CTX = SimpleNamespace(n_threads=2)


class _Meter:
    """Done after two decodes; records the sequences it decoded on."""

    def __init__(
        self,
        costs: BatchCosts | None = None,
        *,
        one_thread: bool = False,
        measurable: bool = True,
        unit_seconds: float | None = None,
    ) -> None:
        self.seq_ids: list[int] = []
        self.done = False
        self.one_thread = one_thread
        self.measurable = measurable
        self.unit_seconds = unit_seconds
        self._costs = costs or BatchCosts({1: 1.0, 2: 1.5})

    def step(self, ctx: object, seq_id: int) -> BatchCosts | None:
        self.seq_ids.append(seq_id)
        self.done = len(self.seq_ids) == 2
        return self._costs if self.done else None


def test_costs_are_measured_between_requests_on_an_empty_slot_only() -> None:
    meter = _Meter()
    speculator = Speculator(SpeculationConfig(types=("ngram-simple",)), n_ctx_slot=256, meter=meter)  # type: ignore[arg-type]
    held, running = _IdleSlot(0, tokens=[1, 2]), _IdleSlot(1, busy=True)
    assert not speculator.measure_idle(_CTX, [held, running], single_decodes_on=2)  # type: ignore[arg-type]
    assert meter.seq_ids == []  # no empty slot: not now
    assert speculator.measure_idle(_CTX, [held, running, _IdleSlot(2)], single_decodes_on=2)  # type: ignore[arg-type]
    assert not speculator.measure_idle(_CTX, [_IdleSlot(3)], single_decodes_on=2)  # type: ignore[arg-type]
    assert meter.seq_ids == [2, 3]
    assert not speculator.measure_idle(_CTX, [_IdleSlot(3)], single_decodes_on=2)  # type: ignore[arg-type]
    assert meter.seq_ids == [2, 3]  # measured: nothing more


def _decoded(n_tokens: int, *, logits: int) -> SimpleNamespace:
    """A context after a decode of ``n_tokens``, ``logits`` of them asking for logits, on 2 threads of each kind."""
    batch = SimpleNamespace(n_tokens=n_tokens, logits=np.array([1] * logits + [0] * (8 - logits), dtype=np.int8))
    return SimpleNamespace(batch=batch, n_threads=2, n_threads_batch=2)


def test_the_engines_own_decodes_correct_costs_measured_in_a_busy_moment() -> None:
    # Measured while another process ran: the single decode at 30 ms (it takes 10), a batch of 4 at 1.33 single
    # decodes (it takes 4): q = 0.9 verifies 3 of the guess (1 + 2.44 kept in 1.33 decodes).
    config = SpeculationConfig(types=("ngram-simple",), ngram_simple=NgramSizes(size_n=3, size_m=4))
    costs = BatchCosts({1: 30.0, 2: 33.0, 3: 36.0, 4: 40.0, 5: 70.0})
    speculator, gen = Speculator(config, n_ctx_slot=1024, costs=costs), _Generation()
    speculator.plan([gen], capacity=64)
    assert gen.draft == (4, 5, 6)
    speculator.observe(_decoded(4, logits=4), 1, 40.0)  # type: ignore[arg-type]  # one of the 2 threads: a try
    speculator.observe(_decoded(4, logits=3), 2, 40.0)  # type: ignore[arg-type]  # a replayed token: no logits
    speculator.observe(_decoded(1, logits=1), 2, 10.0)  # type: ignore[arg-type]  # the others keep their ratio
    speculator.plan([gen], capacity=64)
    assert gen.draft == (4, 5, 6)
    speculator.observe(_decoded(4, logits=4), 2, 40.0)  # type: ignore[arg-type]
    speculator.plan([gen], capacity=64)
    # A batch of 4 now costs 4 decodes: 3 drafted would yield 0.86 tokens a decode, 2 (a batch of 3 in 1.2) 2.26.
    assert gen.draft == (4, 5)


def test_costs_measured_on_one_thread_beside_busy_processes_are_refined_by_decodes_on_one_thread() -> None:
    # As above, but the measurement ran on one of the two threads (the machine was busy): the engine's decodes on
    # one thread are the ones that correct it, and those on two, the count it did not measure on, do not.
    config = SpeculationConfig(types=("ngram-simple",), ngram_simple=NgramSizes(size_n=3, size_m=4))
    meter = _Meter(BatchCosts({1: 30.0, 2: 33.0, 3: 36.0, 4: 40.0, 5: 70.0}), one_thread=True)
    speculator, gen = Speculator(config, n_ctx_slot=1024, meter=meter), _Generation()  # type: ignore[arg-type]
    while speculator.measure_idle(_CTX, [_IdleSlot(0)], single_decodes_on=2):  # type: ignore[arg-type]
        pass
    speculator.plan([gen], capacity=64)
    assert gen.draft == (4, 5, 6)
    speculator.observe(_decoded(1, logits=1), 2, 10.0)  # type: ignore[arg-type]
    speculator.observe(_decoded(4, logits=4), 2, 40.0)  # type: ignore[arg-type]
    speculator.plan([gen], capacity=64)
    assert gen.draft == (4, 5, 6)
    speculator.observe(_decoded(1, logits=1), 1, 10.0)  # type: ignore[arg-type]
    speculator.observe(_decoded(4, logits=4), 1, 40.0)  # type: ignore[arg-type]
    speculator.plan([gen], capacity=64)
    assert gen.draft == (4, 5)


def test_costs_measured_beside_busy_processes_are_measured_again_once_single_decodes_run_on_all_threads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Measured on one of the two threads (the machine was busy), then the machine went quiet and the thread tuner
    # went back to both for single decodes: the costs are measured again, and what that measures is what counts.
    config = SpeculationConfig(types=("ngram-simple",), ngram_simple=NgramSizes(size_n=3, size_m=4))
    busy = _Meter(BatchCosts({1: 30.0, 2: 33.0, 3: 36.0, 4: 40.0, 5: 70.0}), one_thread=True)
    quiet = [_Meter(BatchCosts({1: 10.0, 2: 20.0, 3: 30.0, 4: 40.0, 5: 50.0}))]
    made: list[_Meter] = []

    def measure_again() -> _Meter:
        made.append(quiet[0] if not made else _Meter(one_thread=len(made) % 2 == 1))
        return made[-1]

    speculator = Speculator(config, n_ctx_slot=1024, meter=busy, measure_again=measure_again)  # type: ignore[arg-type]
    ctx, gen = SimpleNamespace(n_threads=2), _Generation()
    while speculator.measure_idle(ctx, [_IdleSlot(0)], single_decodes_on=1):  # type: ignore[arg-type]
        pass
    assert not speculator.measure_idle(ctx, [_IdleSlot(0)], single_decodes_on=None)  # type: ignore[arg-type]
    assert not speculator.measure_idle(ctx, [_IdleSlot(0)], single_decodes_on=1)  # type: ignore[arg-type]
    assert made == []  # measured on one thread; single decodes not compared yet, then still on one
    speculator.plan([gen], capacity=64)
    assert gen.draft == (4, 5, 6)
    with caplog.at_level(logging.INFO, logger="lfmserve.engine.speculation.costs"):
        while speculator.measure_idle(ctx, [_IdleSlot(1)], single_decodes_on=2):  # type: ignore[arg-type]
            pass
    assert made == quiet and quiet[0].seq_ids == [1, 1]
    assert caplog.messages == [
        "speculation: single tokens decode on 2 threads now, on 1 when the costs were measured: measuring them again "
        "between requests"
    ]
    speculator.plan([gen], capacity=64)
    assert gen.draft == ()  # no draft pays at the costs measured again: each token costs a whole decode
    assert not speculator.measure_idle(ctx, [_IdleSlot(1)], single_decodes_on=2)  # type: ignore[arg-type]
    assert len(made) == 1  # measured on the threads single decodes run on: nothing more to measure
    # A machine whose load comes and goes: measured again at each move, four measurements in all at most.
    for threads in (1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2):
        speculator.measure_idle(ctx, [_IdleSlot(1)], single_decodes_on=threads)  # type: ignore[arg-type]
    assert len(made) == 3 and [m.seq_ids for m in made] == [[1, 1]] * 3


def test_costs_measured_in_a_busy_moment_on_every_thread_are_measured_again_once_a_token_decodes_much_faster(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Beside busy processes the measurement may still find every thread as quick as one, and measure on both: its
    # single decode then takes 30 ms where the quiet machine decodes a token in 10.
    config = SpeculationConfig(types=("ngram-simple",))
    made: list[_Meter] = []

    def measure_again() -> _Meter:
        made.append(_Meter())
        return made[-1]

    busy = _Meter(BatchCosts({1: 0.030, 2: 0.033, 4: 0.040}), unit_seconds=0.030)
    speculator = Speculator(config, n_ctx_slot=1024, meter=busy, measure_again=measure_again)  # type: ignore[arg-type]
    ctx = _decoded(1, logits=1)
    while speculator.measure_idle(ctx, [_IdleSlot(0)], single_decodes_on=2):  # type: ignore[arg-type]
        pass
    speculator.observe(ctx, 2, 0.021)  # type: ignore[arg-type]  # faster, but not by half
    speculator.observe(ctx, 1, 0.005)  # type: ignore[arg-type]  # a try of one thread: not what was measured
    assert not speculator.measure_idle(ctx, [_IdleSlot(0)], single_decodes_on=2)  # type: ignore[arg-type]
    assert made == []
    speculator.observe(ctx, 2, 0.010)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="lfmserve.engine.speculation.costs"):
        assert speculator.measure_idle(ctx, [_IdleSlot(0)], single_decodes_on=2)  # type: ignore[arg-type]
    assert len(made) == 1 and caplog.messages == [
        "speculation: a token decodes in 10.0 ms now, in 30.0 ms when the costs were measured: measuring them again "
        "between requests"
    ]
    assert not speculator.measure_idle(ctx, [_IdleSlot(0)], single_decodes_on=2)  # type: ignore[arg-type]
    assert not speculator.measure_idle(ctx, [_IdleSlot(0)], single_decodes_on=2)  # type: ignore[arg-type]
    assert len(made) == 1  # measured again: its single decode is the one to compare with now


def test_a_measurement_again_waits_for_an_empty_slot_and_one_that_fails_leaves_the_costs_in_use() -> None:
    config = SpeculationConfig(types=("ngram-simple",), ngram_simple=NgramSizes(size_n=3, size_m=4))
    made: list[_Meter] = []

    def measure_again() -> _Meter:
        made.append(_FailingMeter(BatchCosts({1: 10.0, 2: 20.0, 3: 30.0, 4: 40.0, 5: 50.0})))
        return made[-1]

    busy = _Meter(BatchCosts({1: 30.0, 2: 33.0, 3: 36.0, 4: 40.0, 5: 70.0}), one_thread=True)
    speculator, gen = Speculator(config, n_ctx_slot=1024, meter=busy, measure_again=measure_again), _Generation()  # type: ignore[arg-type]
    while speculator.measure_idle(_CTX, [_IdleSlot(0)], single_decodes_on=None):  # type: ignore[arg-type]
        pass
    held = _IdleSlot(0, tokens=[1, 2])  # the last request's prompt, kept for the next
    assert not speculator.measure_idle(_CTX, [held], single_decodes_on=2)  # type: ignore[arg-type]
    assert made == []  # due, but no empty sequence to measure on: not begun, not counted
    assert not speculator.measure_idle(_CTX, [held, _IdleSlot(1)], single_decodes_on=2)  # type: ignore[arg-type]
    assert len(made) == 1 and made[0].seq_ids == [1]  # its first decode failed
    speculator.plan([gen], capacity=64)
    assert gen.draft == (4, 5, 6)  # the costs in use before it
    for _ in range(3):
        assert not speculator.measure_idle(_CTX, [_IdleSlot(1)], single_decodes_on=2)  # type: ignore[arg-type]
    assert len(made) == 1  # a failed measurement is not tried again


def test_single_decodes_on_the_threads_the_tuner_chose_when_the_costs_were_measured_are_no_change() -> None:
    # Measured on one thread while the tuner, having compared, decoded single tokens on both: a borderline machine
    # where the two choices differ. Only a move of the tuner's choice since is a change.
    made: list[_Meter] = []

    def measure_again() -> _Meter:
        made.append(_Meter(one_thread=True))
        return made[-1]

    first = _Meter(one_thread=True)
    speculator = Speculator(
        SpeculationConfig(types=("ngram-simple",)), n_ctx_slot=256, meter=first, measure_again=measure_again
    )  # type: ignore[arg-type]
    while speculator.measure_idle(_CTX, [_IdleSlot(0)], single_decodes_on=2):  # type: ignore[arg-type]
        pass
    for _ in range(3):
        speculator.measure_idle(_CTX, [_IdleSlot(0)], single_decodes_on=2)  # type: ignore[arg-type]
    assert made == []
    speculator.measure_idle(_CTX, [_IdleSlot(0)], single_decodes_on=1)  # type: ignore[arg-type]
    assert len(made) == 1


def test_a_model_too_quick_to_time_is_not_measured_again() -> None:
    made: list[_Meter] = []

    def measure_again() -> _Meter:
        made.append(_Meter())
        return made[-1]

    quick = _Meter(BatchCosts(), one_thread=True, measurable=False)  # the linear model: 1 ms decodes are noise
    speculator = Speculator(
        SpeculationConfig(types=("ngram-simple",)), n_ctx_slot=256, meter=quick, measure_again=measure_again
    )  # type: ignore[arg-type]
    for on in (None, 2, 2, 1, 2):
        speculator.measure_idle(_CTX, [_IdleSlot(0)], single_decodes_on=on)  # type: ignore[arg-type]
    assert quick.seq_ids == [0, 0] and made == []


class _FailingMeter(_Meter):
    def step(self, ctx: object, seq_id: int) -> BatchCosts | None:
        super().step(ctx, seq_id)
        raise RuntimeError("injected")


def test_a_measurement_that_fails_ends_and_leaves_the_costs_it_had(caplog: pytest.LogCaptureFixture) -> None:
    """It runs on the engine's thread, outside any request: a failure must not end that thread (the requests after
    it would wait forever)."""
    meter = _FailingMeter()
    speculator = Speculator(SpeculationConfig(types=("ngram-simple",)), n_ctx_slot=256, meter=meter)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="lfmserve.engine.speculation.speculator"):
        assert not speculator.measure_idle(_CTX, [_IdleSlot(0)], single_decodes_on=2)  # type: ignore[arg-type]
    assert not speculator.measure_idle(_CTX, [_IdleSlot(0)], single_decodes_on=2)  # type: ignore[arg-type]
    assert meter.seq_ids == [0]  # measured once, then no more
    assert caplog.messages == ["speculation: measuring what a batch costs failed; the costs so far stand"]
