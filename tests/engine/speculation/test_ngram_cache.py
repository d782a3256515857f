"""``ngram-cache``: the dominant follower of the longest n-gram (1 to 4 tokens) ending the history, drafted greedily."""

from __future__ import annotations

from lfmserve.engine.speculation.ngram_cache import NgramCache


def test_ngram_cache_drafts_the_dominant_follower_of_the_longest_ngram() -> None:
    # Every 4-gram of the cycle 1 2 3 was followed by the next of the cycle: 8 tokens (the most) drafted.
    assert NgramCache().draft([1, 2, 3, 1, 2, 3, 1, 2], 3) == [1, 2, 3, 1, 2, 3, 1, 2]
    # After 5: 1 once and 2 once, 50 % each, below the 66 % a 1-gram needs; no longer n-gram occurred.
    assert NgramCache().draft([5, 1, 5, 2], 5) == []


def test_a_media_position_ends_the_draft() -> None:
    # 7 and a media position (-1) alternate: (7, -1, 7, -1) was followed by 7 once, which is drafted; the
    # n-gram after it is followed by the media position, no token to guess.
    assert NgramCache().draft([7, -1, 7, -1, 7], -1) == [7]


def test_ngrams_across_two_drafts_histories_are_not_counted() -> None:
    """As llama-server's context cache: each update counts the n-grams within the tokens new since the last."""
    history, sampled = [4, 5, 6, 4, 5], 6
    # All at once: (4, 5, 6) was followed by 4, (4, 5, 6, 4) by 5, (5, 6, 4, 5) by 6: the cycle, 8 tokens.
    assert NgramCache().draft(history, sampled) == [4, 5, 6, 4, 5, 6, 4, 5]
    cache = NgramCache()
    assert cache.draft(history[:2], 6) == []  # counted: [4, 5, 6], each n-gram once (1-grams need two)
    # Then only [4, 5, 6] again is counted: 6 -> 4 spans the two, so no n-gram ending in 6 has a follower.
    assert cache.draft(history, sampled) == []
