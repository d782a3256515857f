"""Host-RAM prompt cache (``--cache-ram``): sequence states that left their slot, least recently used first out.

When a request starts, the engine moves every idle slot's full state here (and a slot's own, when an
unrelated prompt is about to replace it), so that the KV cache holds only running sequences; a later
prompt that shares a longer prefix with an entry than with any slot restores it instead of prefilling.
Bounded by bytes; an entry that another entry extends is redundant.
"""

from __future__ import annotations

from .scheduler import CachedSequence, common_prefix_length


class RamPromptCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: list[CachedSequence] = []  # least recently used first

    @property
    def entries(self) -> tuple[CachedSequence, ...]:
        return tuple(self._entries)

    @property
    def n_bytes(self) -> int:
        return sum(e.n_bytes for e in self._entries)

    def covers(self, tokens: list[int] | tuple[int, ...], adapters: tuple[float, ...] = ()) -> bool:
        """Whether some entry already holds these tokens (or more after them), under the same LoRA scales."""
        return any(_extends(e, tokens, adapters) for e in self._entries)

    def put(self, entry: CachedSequence) -> bool:
        """Store an entry, dropping the ones it extends and then the least recently used; False if too big."""
        if self.max_bytes <= 0 or entry.n_bytes > self.max_bytes or self.covers(entry.tokens, entry.adapters):
            return False
        self._entries = [e for e in self._entries if not _extends(entry, e.tokens, e.adapters)]
        self._entries.append(entry)
        while self.n_bytes > self.max_bytes:
            self._entries.pop(0)
        return True

    def touch(self, entry: CachedSequence) -> None:
        """Mark an entry as just used."""
        if entry in self._entries:
            self._entries.remove(entry)
            self._entries.append(entry)


def _extends(entry: CachedSequence, tokens: tuple[int, ...] | list[int], adapters: tuple[float, ...]) -> bool:
    return entry.adapters == adapters and common_prefix_length(entry.tokens, tokens) == len(tokens)
