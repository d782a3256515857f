"""The host-RAM prompt cache: least recently used out first, bounded by bytes, no entry another one extends."""

from __future__ import annotations

from lfmserve.engine.prompt_cache import RamPromptCache
from lfmserve.engine.scheduler import CachedSequence


def test_ram_cache_is_lru_by_bytes_and_drops_what_an_entry_extends() -> None:
    cache = RamPromptCache(max_bytes=20)
    a, b = CachedSequence((1, 2), b"x" * 8), CachedSequence((3, 4), b"y" * 8)
    assert cache.put(a) and cache.put(b)
    assert not cache.put(CachedSequence((1,), b"z"))  # already covered by a
    longer = CachedSequence((1, 2, 5), b"w" * 8)
    assert cache.put(longer) and cache.entries == (b, longer)  # a was a prefix of it
    cache.touch(b)
    assert cache.put(CachedSequence((9,), b"v" * 8)) and cache.entries == (b, CachedSequence((9,), b"v" * 8))
    assert not cache.put(CachedSequence((8,), b"u" * 30))  # larger than the whole cache


def test_covers_says_whether_an_entry_holds_the_tokens_or_more() -> None:
    cache = RamPromptCache(max_bytes=100)
    cache.put(CachedSequence((1, 2, 3), b"x" * 8))
    assert (cache.covers([1, 2]), cache.covers((1, 2, 3)), cache.covers([1, 2, 3, 4]), cache.covers([2])) == (
        True,
        True,
        False,
        False,
    )
    assert cache.n_bytes == 8


def test_a_cache_of_zero_bytes_takes_nothing() -> None:
    cache = RamPromptCache(max_bytes=0)
    assert not cache.put(CachedSequence((1,), b"")) and cache.entries == ()
