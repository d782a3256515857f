"""``ngram-mod``: one hash table shared by every generation, from each window of tokens to the one after it."""

from __future__ import annotations

from lfmserve.engine.speculation import NgramModSizes
from lfmserve.engine.speculation.ngram_mod import TABLE_SIZE, NgramMod, NgramModTable


def test_ngram_mod_follows_its_shared_hash_table() -> None:
    table = NgramModTable(NgramModSizes(n_match=2))
    # llama.cpp's hash: res = res * 6364136223846793005 + token (mod 2**64), then mod the table's size.
    assert table.index([1, 2]) == (6364136223846793005 * 1 + 2) % TABLE_SIZE
    drafter = NgramMod(table, NgramModSizes(n_match=2, n_min=1, n_max=4))
    # Windows [1,2] -> 3, [2,3] -> 4, [3,4] -> 5, [4,5] -> 1 are added; the draft follows them from [1, 2].
    assert drafter.draft([1, 2, 3, 4, 5, 1], 2) == [3, 4, 5, 1]
    assert table.entries[table.index([2, 3])] == 4 and table.used == 4
    # Shared: another generation drafts from what this one added.
    assert NgramMod(table, NgramModSizes(n_match=2, n_min=1, n_max=2)).draft([9, 3], 4) == [5, 1]
    assert NgramMod(table, NgramModSizes(n_match=2, n_min=5, n_max=8)).draft([9, 1], 2) == []  # 4 < n_min
    for _ in range(5):  # five drafts in a row of which less than a quarter was kept: the table is cleared
        assert drafter.draft([1, 2, 3, 4, 5, 1], 2) == [3, 4, 5, 1]
        drafter.accept(0)
        if table.used == 0:
            break
        assert drafter.draft([1, 2, 3, 4, 5, 1], 2)  # (re-added after the clear only)
    assert table.used == 0


def test_a_window_hashed_to_a_used_entry_overwrites_it() -> None:
    table = NgramModTable(NgramModSizes(n_match=1), size=16)  # one token a window: its hash is the token itself
    table.add([3, 4, 5], 0, 2)  # [3] -> 4, [4] -> 5
    assert (table.get([3]), table.get([4]), table.get([5]), table.used) == (4, 5, -1, 2)
    assert table.get([19]) == 4  # 19 hashes to entry 3 too: [3]'s follower is what it finds
    table.add([19, 7], 0, 1)  # the latest window hashed there wins
    assert (table.get([3]), table.used) == (7, 2)
    table.reset()
    assert table.used == 0


def test_a_draft_shorter_than_n_min_is_none_and_no_draft_is_none_to_accept() -> None:
    table = NgramModTable(NgramModSizes(n_match=2), size=64)
    short = NgramMod(table, NgramModSizes(n_match=2, n_min=3, n_max=8))
    # [1, 2] -> 3 and [2, 3] -> 1 are added (the windows with a token after them); [3, 1] has no entry: 2 tokens.
    assert short.draft([1, 2, 3, 1], 2) == [] and table.used == 2
    assert NgramMod(table, NgramModSizes(n_match=2, n_min=1, n_max=8)).draft([1, 2, 3, 1], 2) == [3, 1]
