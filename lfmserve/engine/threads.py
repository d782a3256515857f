"""How many of its threads each decode uses: the fastest count, measured on the decodes themselves.

ggml's threads meet at a barrier after every operation of a graph, so a decode runs at the pace of its slowest
thread. When another process keeps a core busy, the kernel gives it time slices that one of the decode's threads
waits out, and every barrier waits with it: on 2 cores beside one CPU-bound process, Gemma-3-270M decodes at
4 tokens/s on 2 threads and at 26 on 1 (46 and 26 on a quiet machine). llama-server keeps ``-t`` threads for its
whole life; lfmserve tries fewer threads now and then and keeps the count whose decodes are quickest, for each
size of batch (a prompt's micro-batch parallelises better than one token). On a quiet machine the fewer
threads lose and are tried ever more rarely (one decode in 256 at most); when decodes slow down, the others are
tried again at once.

A try costs what the batch costs: a 24-token draft verified on one thread took 480 ms against 260 on two, a
256-token prompt chunk 1,670 against 950, where a single token took 45 against 29. So the smallest size decoded
lately is the machine's sentinel: while it keeps every thread, larger batches that keep every thread too are not
tried on fewer (before this rule, served drafts on Gemma-3-270M lost 2-4% of their decode time to such tries, as the
machine's noise lifts an average past its best often enough). Once it finds fewer threads faster, the others try theirs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

#: Decodes between two tries of another count after the first (doubled each time the other count loses).
FIRST_TRY = 8
LAST_TRY = 256
#: A count replaces the kept one when its decode takes less than this fraction of the kept one's time.
WINS_BELOW = 0.85
#: The kept count's time rising above its best by this factor (the machine got busy) brings the next try forward.
SLOWED_DOWN = 1.5
#: Weight of a new decode time in the kept count's running average.
NEW_WEIGHT = 0.25
#: A size class speaks for the machine while it decoded within this many of the context's last decodes.
RECENT = 64


def candidate_counts(n_threads: int, *, adaptive: bool = True) -> tuple[int, ...]:
    """The thread counts tried, most first: all of them, one less, half and one (each at most once); all of them
    only when not ``adaptive`` (``--no-adaptive-threads``)."""
    counts = {n_threads, max(1, n_threads - 1), max(1, n_threads // 2), 1} if adaptive else {n_threads}
    return tuple(sorted(counts, reverse=True))


def size_class(n_tokens: int) -> int:
    """Batches of similar size share their measurements: 1, 2-3, 4-7, ... 128 and more tokens."""
    return min(n_tokens.bit_length(), 8)


@dataclass(slots=True)
class _Record:
    """One size class's measurements: seconds per token of each count, the count kept, when to try another."""

    counts: tuple[int, ...]
    kept: int
    per_token: dict[int, float] = field(default_factory=dict)
    best_kept: float = float("inf")
    decodes: int = 0
    next_try: int = FIRST_TRY
    interval: int = FIRST_TRY
    tried: int = 0
    #: The context's decode count at this class's last decode.
    last_seen: int = -RECENT - 1

    @property
    def limit(self) -> int:
        return self.counts[0]

    def pick(self) -> int:
        if self.decodes < self.next_try or len(self.counts) == 1:
            return self.kept
        others = [count for count in self.counts if count != self.kept]
        return others[self.tried % len(others)]

    def observe(self, count: int, seconds_per_token: float) -> int | None:
        """Record one decode; the new count to keep when this one beat the kept count."""
        self.decodes += 1
        if count == self.kept:
            old = self.per_token.get(count)
            average = seconds_per_token if old is None else old + NEW_WEIGHT * (seconds_per_token - old)
            self.per_token[count] = average
            self.best_kept = min(self.best_kept, seconds_per_token)
            if average > SLOWED_DOWN * self.best_kept and self.interval > FIRST_TRY:
                self.next_try, self.interval = self.decodes, FIRST_TRY  # slower than it was: look again now
            return None
        self.tried += 1
        self.per_token[count] = seconds_per_token  # the last try only: an older one says little about now
        kept_time = self.per_token.get(self.kept, float("inf"))
        if seconds_per_token < WINS_BELOW * kept_time:
            self.kept, self.best_kept = count, seconds_per_token
            self.interval = FIRST_TRY
            self.next_try = self.decodes + self.interval
            return count
        self.interval = min(2 * self.interval, LAST_TRY)
        self.best_kept = kept_time  # a slowdown is measured from now on
        self.next_try = self.decodes + self.interval
        return None


class ThreadTuner:
    """The thread count of each decode of one context, from ``n_threads`` (``-t``) and ``n_threads_batch``
    (``-tb``, for batches of more than one token) down, or always those when not ``adaptive``. The engine thread
    alone uses it: :meth:`pick` before a decode, :meth:`observe` with the seconds it took."""

    def __init__(self, n_threads: int, n_threads_batch: int, *, adaptive: bool = True) -> None:
        self._limits = (n_threads, n_threads_batch)
        self._adaptive = adaptive
        self._records: dict[int, _Record] = {}
        self._decodes = 0

    def pick(self, n_tokens: int) -> int:
        record = self._record(n_tokens)
        return record.kept if self._quiet_by_sentinel(record) else record.pick()

    def observe(self, n_tokens: int, count: int, seconds: float) -> None:
        record = self._record(n_tokens)
        self._decodes += 1
        record.last_seen = self._decodes
        was = record.kept
        if record.observe(count, seconds / max(n_tokens, 1)) is not None:
            logger.info(
                "decoding batches of %s on %d thread%s instead of %d: %.1f ms a token against %.1f ms",
                _size_name(size_class(n_tokens)),
                count,
                "" if count == 1 else "s",
                was,
                1e3 * record.per_token[count],
                1e3 * record.per_token.get(was, float("nan")),
            )

    def kept(self, n_tokens: int) -> int:
        """The count kept for batches of ``n_tokens`` (the most until a try says otherwise)."""
        return self._record(n_tokens).kept

    def chosen(self, n_tokens: int) -> int | None:
        """:meth:`kept`, once it is a choice: a decode on another count has been timed against it, or no other count
        is tried (None before: ``-t`` or ``-tb`` as given, which says nothing yet of how busy the machine is)."""
        record = self._record(n_tokens)
        return record.kept if record.tried or len(record.counts) == 1 else None

    def _quiet_by_sentinel(self, record: _Record) -> bool:
        """Whether ``record`` keeps every thread and a smaller size class decoded lately, with the same limit and
        other counts timed, keeps every thread too: the machine is quiet, and a try would cost its batch for nothing."""
        if record.kept != record.limit:
            return False
        for key in sorted(self._records):
            sentinel = self._records[key]
            if sentinel is record:
                return False
            if sentinel.tried and self._decodes - sentinel.last_seen <= RECENT and sentinel.limit == record.limit:
                return sentinel.kept == sentinel.limit
        return False

    def _record(self, n_tokens: int) -> _Record:
        key = size_class(n_tokens)
        record = self._records.get(key)
        if record is None:
            limit = self._limits[0] if n_tokens <= 1 else self._limits[1]
            record = self._records[key] = _Record(candidate_counts(limit, adaptive=self._adaptive), limit)
        return record


def _size_name(size: int) -> str:
    if size <= 1:
        return "1 token"
    low = 1 << (size - 1)
    return f"{low} tokens or more" if size == 8 else f"{low}-{2 * low - 1} tokens"
