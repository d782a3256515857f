"""What a decode of n tokens costs on this machine, measured between requests (:class:`CostMeter`), or when the
engine starts (:func:`measure_batch_costs`, for ``--spec-exact``).

How long a draft is worth verifying depends on this cost (:mod:`.worth`), and no formula gets it right:
llama.cpp's CPU matrix kernels take the batch four columns at a time, so 8 tokens can decode faster than 5,
6 or 7. So the engine decodes throwaway batches on an empty sequence, every position
asking for logits as a verified draft does. It times every count up to 8, then every fourth up to 24 and
every eighth past it, within a time budget; a count between two measured ones costs what the next one up
costs.

Three precautions keep the measurement honest. The first decodes after loading are slow, so two untimed
decodes come first. Each count is timed twice and the faster time is kept, since the slower one is noise from
elsewhere on the machine. The unit, a single decode, is timed beside every count and its fastest time kept:
a unit timed in a slow moment makes every batch look cheap, and the engine then verifies drafts it cannot
pay for. A model that decodes a token in under 2 ms (the test models) is not measured: the linear model of
:mod:`.worth` stands in. docs/benchmarks.md has the measured figures.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from ...llama.context import NativeContext
from ..threads import SLOWED_DOWN, WINS_BELOW
from .worth import BatchCosts, best_draft_length

logger = logging.getLogger(__name__)

#: Seconds of decoding the measurement may take at most (at start: the first pass stops there, a second pass only
#: in what is left; between requests: no pass begins after them).
BUDGET_S = 5.0
#: A single-token decode faster than this is timer noise and Python's own per-step time (the test models):
#: the linear model stands in, and the same request drafts the same way on every run.
MEASURABLE_S = 0.002
#: Single-token decodes timed for the unit before the other counts (every count is divided by the fastest).
UNIT_REPEATS = 3
#: Times each count is timed, the fastest kept.
PASSES = 2


#: A single decode on all the threads this many times slower than on one decides the measurement's threads at once.
DECIDED_ABOVE = 2.0

#: Passes an idle-time measurement makes at most; it ends sooner once a pass changes no count's time by more
#: than :data:`STABLE`.
MAX_PASSES = 6
STABLE = 0.03


def measured_counts(n_max: int) -> list[int]:
    """The token counts timed for batches of up to ``n_max``: 1 .. 8, every fourth to 24, every eighth past it,
    and ``n_max`` itself."""
    counts = [n for n in (*range(1, 9), *range(12, 25, 4), *range(32, n_max + 1, 8)) if n <= n_max]
    return counts if counts[-1] == n_max else [*counts, n_max]


def measure_batch_costs(ctx: NativeContext, *, seq_id: int, n_max: int, budget_s: float = BUDGET_S) -> BatchCosts:
    """Decode batches of up to ``n_max`` tokens on ``seq_id`` (empty, and left empty), each a verified batch."""
    counts = measured_counts(max(1, min(n_max, ctx.n_batch)))
    threads = max(ctx.n_threads, ctx.n_threads_batch)
    start = time.perf_counter()
    deadline = start + budget_s
    for n in (counts[-1], 1):  # untimed: the weights paged in, every kernel run once
        _timed_decode(ctx, seq_id, n, threads)
    best: dict[int, float] = {1: min(_timed_decode(ctx, seq_id, 1, threads) for _ in range(UNIT_REPEATS))}
    if best[1] < MEASURABLE_S:
        logger.info("speculation: a decode takes %.2f ms, too little to measure: linear costs", best[1] * 1000)
        return BatchCosts()
    for _ in range(PASSES):
        for n in counts[1:]:
            if time.perf_counter() > deadline:
                break
            # A single decode beside each count: the unit is the fastest of them all, not of a slow moment.
            best[1] = min(best[1], _timed_decode(ctx, seq_id, 1, threads))
            best[n] = min(best.get(n, float("inf")), _timed_decode(ctx, seq_id, n, threads))
    costs = BatchCosts(best)
    logger.info(
        "speculation: decode costs of 1..%d tokens measured in %.1f s (1 token %.1f ms; in single decodes: %s)",
        max(best),
        time.perf_counter() - start,
        best[1] * 1000,
        " ".join(f"{n}:{u:.2f}" for n, u in zip(costs.counts, costs.units, strict=True)),
    )
    return costs


class CostMeter:
    """The same measurement, one decode at a time, while the engine has nothing else to do: a start with
    ``--spec-type`` then takes no longer than one without, and a request that comes waits one decode at most.

    Until the first pass ends the linear model stands in. Passes go on (each count's fastest time kept, as noise
    only ever adds) until one changes no time by more than 3%, six are done, or their decodes have taken
    :data:`BUDGET_S` (then at once, with the counts timed so far). They decode on the thread count that decodes a
    token faster (:meth:`_choose_threads`). The engine's own decodes then refine the figures
    (:meth:`.worth.BatchCosts.refined`), so figures measured while the machine was busy do not last.
    """

    def __init__(self, n_max: int, *, adaptive: bool = True) -> None:
        """``adaptive``: whether the engine may decode on fewer threads than it has (the thread tuner's; without,
        ``--no-adaptive-threads``, it decodes on all of them, and the costs are measured there)."""
        self.counts = measured_counts(max(1, n_max))
        self._adaptive = adaptive
        #: What is left to decode: a count, whether its time counts, and on how many threads (None: the count
        #: :meth:`_choose_threads` chose). Planned at the first step, which knows the context's threads.
        self._queue: deque[tuple[int, bool, int | None]] = deque()
        self._best: dict[int, float] = {}
        self._last_pass: dict[int, float] = {}
        self._passes = 0
        self._seconds = 0.0
        #: The threads the measurement decodes on, once chosen, and the fastest single decode on each count tried.
        self._threads: int | None = None
        self._unit_on: dict[int, float] = {}
        #: Whether the costs are measured on one thread of several (the engine's decodes on one refine them).
        self.one_thread = False
        #: False once a decode took too little time to measure (the linear model then stands, however measured).
        self.measurable = True
        self.done = False

    def step(self, ctx: NativeContext, seq_id: int) -> BatchCosts | None:
        """One decode on ``seq_id`` (empty, and left empty); the costs measured so far when it ended a pass, or
        when the decodes have taken :data:`BUDGET_S` (mid-pass: the counts timed by then)."""
        all_threads = max(ctx.n_threads, ctx.n_threads_batch)
        if not self._queue and not self._passes:
            self._queue.extend(self._first(all_threads))
        n, timed, choice = self._queue.popleft()
        if choice is None and self._threads is None:
            self._threads = self._choose_threads(all_threads)
        seconds = _timed_decode(ctx, seq_id, min(n, ctx.n_batch), choice or self._threads or all_threads)
        if timed and choice is not None:
            self._unit_on[choice] = min(self._unit_on.get(choice, float("inf")), seconds)
            if choice > 1 and seconds > DECIDED_ABOVE * self._unit_on.get(1, float("inf")):
                # Beside busy processes one such decode can take seconds, which a request that comes waits out.
                self._queue = deque(item for item in self._queue if item[2] is None)
            return None
        self._seconds += seconds
        if timed:
            self._best[n] = min(self._best.get(n, float("inf")), seconds)
        # Beside another busy process a pass can take ten times as long, and its decodes slow that process down.
        over_budget = self._seconds >= BUDGET_S and 1 in self._best
        if self._queue and not over_budget:
            return None
        if self._best[1] < MEASURABLE_S or len(self._best) < 2:
            self.done = True
            # Too quick to time, or the budget spent before a second count was timed.
            self.measurable = self._best[1] >= MEASURABLE_S
            why = "long" if self.measurable else "little"
            unit_ms = self._best[1] * 1e3
            logger.info("speculation: a decode takes %.2f ms, too %s to measure: linear costs", unit_ms, why)
            return BatchCosts()
        self._passes += 1
        if self._last_pass and not over_budget:
            moved = max(1 - self._best[n] / self._last_pass[n] for n in self._best)
            self.done = moved <= STABLE or self._passes >= MAX_PASSES
        self.done |= over_budget
        self._last_pass = dict(self._best)
        costs = BatchCosts(self._best)
        if self.done:
            self._log(costs)
        else:
            self._queue.extend(self._pass())
        return costs

    @property
    def unit_seconds(self) -> float | None:
        """The fastest single decode timed on the threads measured on (None: none yet), linear costs or not."""
        return self._best.get(1)

    def _first(self, threads: int) -> list[tuple[int, bool, int | None]]:
        """Two untimed decodes, as above but small (a request that comes meanwhile waits for one of them); with
        several threads, the first on one, then single decodes on one and on all of them in turn
        (:meth:`_choose_threads`; one on all of them slower than one thread by :data:`DECIDED_ABOVE` decides at
        once), then the second on the threads chosen; the unit; the first pass."""
        choosing = threads > 1 and self._adaptive
        choice: list[tuple[int, bool, int | None]] = (
            [(1, True, count) for _ in range(UNIT_REPEATS) for count in (1, threads)] if choosing else []
        )
        warm_up = (min(8, self.counts[-1]), False, None)
        unit: list[tuple[int, bool, int | None]] = [(1, True, None)] * UNIT_REPEATS
        return [(1, False, 1 if choosing else threads), *choice, warm_up, *unit, *self._pass()]

    def _choose_threads(self, threads: int) -> int:
        """Measure on all the threads, or on one where one decodes a token faster by the thread tuner's margin.
        Beside busy processes every barrier of a decode on all the threads waits for a core (a hundred times
        slower than quiet, measured: docs/benchmarks.md), the figures are noise, and the engine's own decodes
        run on one thread then (:mod:`..threads`)."""
        one, every = self._unit_on.get(1, float("inf")), self._unit_on.get(threads, float("inf"))
        self.one_thread = one < WINS_BELOW * every
        if self.one_thread:
            logger.info(
                "speculation: a token decodes in %.1f ms on one thread and %.1f ms on %d: costs measured on one",
                one * 1e3,
                every * 1e3,
                threads,
            )
        return 1 if self.one_thread else threads

    def _log(self, costs: BatchCosts) -> None:
        logger.info(
            "speculation: decode costs of 1..%d tokens measured between requests in %d passes, %.1f s of decoding "
            "(1 token %.1f ms; in single decodes: %s); drafts worth verifying for one stream at acceptance "
            "0.5 / 0.8 / 0.95: %s tokens",
            self.counts[-1],
            self._passes,
            self._seconds,
            self._best[1] * 1e3,
            " ".join(f"{n}:{u:.2f}" for n, u in zip(costs.counts, costs.units, strict=True)),
            " / ".join(str(best_draft_length(q, self.counts[-1] - 1, costs=costs)) for q in (0.5, 0.8, 0.95)),
        )

    def _pass(self) -> list[tuple[int, bool, int | None]]:
        """Each count timed once, beside a single decode (the unit is the fastest of them all, as above)."""
        return [item for n in self.counts[1:] for item in ((1, True, None), (n, True, None))]


#: Measurements between requests in a server's life at most: the first, and one each time the machine has changed
#: since the last (:class:`Remeasurement`), up to this many in all.
MEASUREMENTS = 4


class Remeasurement:
    """When the costs measured between requests no longer describe the machine, and a new measurement is due.

    A server started beside busy processes measures them there (on one thread, or on all in a busy moment), and
    refining by its own decodes cannot undo that: costs measured on one thread are not refined by decodes on two,
    and a count no draft is verified at is never timed again. So once the machine has changed, the costs are
    measured again: when the thread tuner's choice for single decodes differs from the threads measured on (or, once
    it had chosen, from its choice then), or a single decode on the measured threads runs :data:`SLOWED_DOWN` times
    faster than the measurement's. At most :data:`MEASUREMENTS` in all, so a machine whose load comes and goes does
    not keep the server measuring; none after a measurement fails.
    """

    def __init__(self, make_meter: Callable[[], CostMeter] | None) -> None:
        self._make_meter = make_meter
        self._left = MEASUREMENTS - 1 if make_meter is not None else 0
        #: The last measurement's threads, the tuner's choice when it ended, its single decode; a faster one since.
        self._threads: int | None = None
        self._tuner_then: int | None = None
        self._unit: float | None = None
        self._faster: float | None = None

    def measured(self, meter: CostMeter, all_threads: int, tuner_choice: int | None) -> None:
        """``meter``'s measurement ended, while the tuner chose ``tuner_choice`` (None: it had not yet). A model
        whose decodes are too quick to time is not measured again: it would be too quick again."""
        self._threads = 1 if meter.one_thread else all_threads
        self._tuner_then, self._unit, self._faster = tuner_choice, meter.unit_seconds, None
        if not meter.measurable:
            self._left = 0

    def decoded_single(self, seconds: float) -> None:
        """A single decode on the measured threads took ``seconds``."""
        if self._unit is not None and seconds * SLOWED_DOWN < self._unit:
            self._faster = seconds  # the measurement's decodes waited for a busy machine

    def failed(self) -> None:
        self._left = 0

    def due(self, tuner_choice: int | None) -> CostMeter | None:
        """A new measurement's meter, if the machine has changed since the last (None: it has not, none was made,
        or none is left). ``tuner_choice``: the thread tuner's count for single decodes (None: not chosen yet)."""
        if self._make_meter is None or not self._left or self._threads is None:
            return None
        reference = self._tuner_then if self._tuner_then is not None else self._threads
        if tuner_choice is not None and tuner_choice != reference:
            logger.info(
                "speculation: single tokens decode on %d thread%s now, on %d when the costs were measured: measuring "
                "them again between requests",
                tuner_choice,
                "" if tuner_choice == 1 else "s",
                reference,
            )
        elif self._faster is not None and self._unit is not None:
            logger.info(
                "speculation: a token decodes in %.1f ms now, in %.1f ms when the costs were measured: measuring them "
                "again between requests",
                self._faster * 1e3,
                self._unit * 1e3,
            )
        else:
            return None
        self._left -= 1
        return self._make_meter()


def _timed_decode(ctx: NativeContext, seq_id: int, n: int, threads: int) -> float:
    """One decode of ``n`` tokens on ``threads`` (the engine's last decode may have used another count)."""
    ctx.use_threads(threads)
    batch = ctx.batch
    batch.clear()
    batch.add(np.arange(n, dtype=np.int32) % ctx.model.n_vocab, 0, seq_id, want_last_logits=True)
    batch.logits[:n] = 1
    t0 = time.perf_counter()
    try:
        ctx.decode(batch)
        return time.perf_counter() - t0
    finally:
        batch.clear()
        ctx.seq_clear(seq_id)
