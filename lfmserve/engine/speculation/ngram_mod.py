"""``ngram-mod``: a hash table from every ``n_match`` tokens seen to the token that followed them.

llama-server's ``common_ngram_mod``: one table of 4 Mi entries shared by every slot and kept across
requests (what one request taught helps the next), an entry overwritten by the latest n-gram hashed to it.
A draft follows the table from the latest tokens for as long as it has entries, at most ``n_max`` and none
shorter than ``n_min``; the table is cleared when a quarter of it is used, or after five drafts in a row of
which less than a quarter was kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .config import NgramModSizes
from .worth import Acceptance

TABLE_SIZE = 4 * 1024 * 1024
EMPTY = -1
#: llama-server's multiplier (``common_ngram_mod::idx``), arithmetic modulo 2**64.
_MULTIPLIER = 6364136223846793005
_MASK = 2**64 - 1
#: New tokens are added to the table once this many have gathered.
_ADD_EVERY = 32
MAX_OCCUPANCY = 0.25
LOW_ACCEPTANCE = 0.25
LOW_STREAK = 5


class NgramModTable:
    """The shared table."""

    def __init__(self, sizes: NgramModSizes, size: int = TABLE_SIZE) -> None:
        self.n = sizes.n_match
        self.entries: npt.NDArray[np.int32] = np.full(size, EMPTY, dtype=np.int32)
        # The multiplier's powers, for hashing every window of a run of tokens at once.
        powers = [1]
        for _ in range(self.n - 1):
            powers.append(powers[-1] * _MULTIPLIER & _MASK)
        self._powers = np.array(powers[::-1], dtype=np.uint64)

    @property
    def used(self) -> int:
        return int(np.count_nonzero(self.entries != EMPTY))

    def reset(self) -> None:
        self.entries.fill(EMPTY)

    def index(self, window: Sequence[int]) -> int:
        """The entry of ``n`` tokens: llama.cpp's ``res = res * multiplier + token`` over them, modulo the size."""
        res = 0
        for token in window:
            res = (res * _MULTIPLIER + (token & _MASK)) & _MASK
        return res % len(self.entries)

    def add(self, tokens: Sequence[int], start: int, stop: int) -> None:
        """Record the token after each window of ``n`` starting at ``start`` .. ``stop - 1``."""
        if stop <= start:
            return
        history = np.asarray(tokens, dtype=np.int64)
        unsigned = history.astype(np.uint64)  # a media position's negative id wraps, as in C++
        hashes = np.zeros(stop - start, dtype=np.uint64)
        with np.errstate(over="ignore"):  # modulo 2**64, as the C++ size_t arithmetic
            for j, power in enumerate(self._powers):
                hashes += unsigned[start + j : stop + j] * power
        slots = (hashes % np.uint64(len(self.entries))).astype(np.int64)
        self.entries[slots] = history[start + self.n : stop + self.n]

    def get(self, window: Sequence[int]) -> int:
        return int(self.entries[self.index(window)])


class NgramMod:
    """One generation's drafter over the shared table."""

    own_acceptance: Acceptance | None = None  # one record: the generation's

    def __init__(self, table: NgramModTable, sizes: NgramModSizes) -> None:
        self._table = table
        self._sizes = sizes
        self._added_to = 0  # windows starting before this are in the table
        self._n_last = 0
        self._low_streak = 0

    def draft(self, tokens: Sequence[int], sampled: int) -> list[int]:
        table, n, cur_len = self._table, self._table.n, len(tokens)
        self._n_last = 0
        if cur_len < n:
            return []
        if self._added_to == 0 or self._added_to + _ADD_EVERY < cur_len:
            self._add(tokens)
        window = [*tokens[cur_len - n + 1 :], sampled]
        draft: list[int] = []
        while len(draft) < self._sizes.n_max:
            token = table.get(window[len(draft) :])
            if token < 0:  # no entry (or a media position followed the n-gram: no token to guess)
                break
            draft.append(token)
            window.append(token)
        if len(draft) < self._sizes.n_min:
            return []
        self._n_last = len(draft)
        return draft

    def _add(self, tokens: Sequence[int]) -> None:
        """Add the windows not in the table yet; clear it first when it is too full (as ``begin`` there)."""
        table = self._table
        if table.used > MAX_OCCUPANCY * len(table.entries):
            table.reset()
        stop = len(tokens) - table.n
        table.add(tokens, self._added_to, stop)
        self._added_to = max(stop, self._added_to)

    def accept(self, n_accepted: int) -> None:
        if self._n_last == 0:
            return
        if n_accepted / self._n_last < LOW_ACCEPTANCE:
            self._low_streak += 1
            if self._low_streak >= LOW_STREAK:
                self._table.reset()
                self._low_streak = 0
                self._added_to = 0
        else:
            self._low_streak = 0
