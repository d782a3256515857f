"""The n-gram drafters over a request's own history: ``ngram-simple`` (llama-server's look-up, then re-alignment
and the longest recent match) and ``ngram-map-k``/``-k4v``."""

from __future__ import annotations

from lfmserve.engine.speculation import NgramSizes
from lfmserve.engine.speculation.ngram import NgramMap, NgramSimple, text_only


def test_text_only_cuts_a_draft_at_its_first_media_position() -> None:
    assert text_only([4, 5, -1, 6]) == [4, 5]
    assert text_only([-3, 4]) == []
    assert text_only((4, 5, 6)) == [4, 5, 6]


def test_ngram_simple_drafts_what_followed_the_latest_earlier_match() -> None:
    drafter = NgramSimple(NgramSizes(size_n=3, size_m=4))
    history = [9, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 9, 9, 9, 1, 2]
    # pattern [1, 2] + sampled 3: at 1 and at 9; the latest (9) wins, and at most size_m tokens follow it.
    assert drafter.draft(history, 3) == [9, 9, 9, 1]
    assert drafter.draft(history, 7) == []  # [1, 2, 7] never occurred
    assert drafter.draft(history[:8], 3) == []  # too short a history: size_n + size_m + 1 tokens at least
    # Fewer than size_n tokens after the match: no draft (llama-server's rule).
    assert NgramSimple(NgramSizes(size_n=3, size_m=8)).draft([5, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 7, 7, 1, 2], 3) == [
        4,
        0,
        0,
        0,
        0,
        0,
        0,
        7,
    ]
    assert NgramSimple(NgramSizes(size_n=3, size_m=3)).draft([5, 5, 5, 5, 1, 2, 3, 8, 9, 1, 2], 3) == [8, 9, 1]
    # A media position (negative id) ends the draft.
    assert drafter.draft([9, 1, 2, 3, 4, -7, 6, 7, 8, 0, 0, 1, 2], 3) == [4]


def test_ngram_simple_realigns_near_where_the_copy_was_after_a_change() -> None:
    prompt = [1, *range(10, 30), 2]
    drafter = NgramSimple(NgramSizes(size_n=5, size_m=6))
    reply = [10, 11, 12, 13]
    assert drafter.draft([*prompt, *reply], 14) == [15, 16, 17, 18, 19, 20]  # [10 .. 14] as in the prompt
    drafter.accept(1)  # 15 kept; then the reply changes 16 into 77 and copies on
    reply += [14, 15]
    assert drafter.draft([*prompt, *reply], 77) == []
    assert drafter.draft([*prompt, *reply, 77], 17) == []
    assert drafter.draft([*prompt, *reply, 77, 17], 18) == []
    # [17, 18, 19] is right where the copy had got to: the draft goes on from there, while llama-server's
    # look-up waits for 5 tokens after the change to match.
    assert drafter.draft([*prompt, *reply, 77, 17, 18], 19) == [20, 21, 22, 23, 24, 25]
    assert drafter.own_acceptance is not None  # measured apart from the full look-up's drafts
    drafter.accept(6)
    assert drafter.draft([*prompt, *reply, 77, 17, 18, 19, *range(20, 26)], 26) == [27, 28, 29, 2, 10, 11]
    assert drafter.own_acceptance is None  # [22 .. 26] as in the prompt: llama-server's look-up


def test_ngram_simple_falls_back_to_the_longest_recent_match_of_three_tokens_or_more() -> None:
    prompt = [1, *range(10, 30), 2, 40, 41, 17, 18, 50]
    fresh = NgramSimple(NgramSizes(size_n=5, size_m=6))
    # llama-server's look-up needs the latest 5 tokens; [77, 17, 18] + 19 matches 3 of them (at 17 .. 19).
    assert fresh.draft([*prompt, 77, 17, 18], 19) == [20, 21, 22, 23, 24, 25]
    assert fresh.own_acceptance is not None and fresh.own_acceptance.q == 0.7  # its prior: 7 kept to 3 cut
    # [17, 18] + 50: the only match is 3 long (41 before it differs from 30): after it, the history's end.
    assert NgramSimple(NgramSizes(size_n=5, size_m=6)).draft([*prompt, 30, 17, 18], 50) == [30, 17, 18]
    # Of two matches of [.., 17, 18] + 19 the longer (4 tokens: after 16, as the history ends) beats the later.
    two = [3, 16, 17, 18, 19, 60, 61, 62, 4, 5, 17, 18, 19, 70, 71, 72, 6, 7, 16, 17, 18]
    assert NgramSimple(NgramSizes(size_n=5, size_m=3)).draft(two, 19) == [60, 61, 62]
    assert NgramSimple(NgramSizes(size_n=5, size_m=3)).draft([*two[:-3], 9, 17, 18], 19) == [70, 71, 72]
    # Two tokens are not enough: [40, 18] + 50 occurs nowhere 3 long ([17, 18, 50] does not end in 40, 18).
    assert NgramSimple(NgramSizes(size_n=5, size_m=6)).draft([*prompt, 40, 18], 50) == []


def test_ngram_map_k_drafts_after_the_first_recorded_match_cut_to_what_was_kept_last() -> None:
    drafter = NgramMap(NgramSizes(size_n=2, size_m=2), key_only=True)
    history = [0, 5, 6, 1, 2, 5, 6, 3, 4, 9, 9, 9, 5]
    # Key [5, 6] at 1 and 5 (both with 2 tokens after them); the first look-up takes the latest, 5.
    assert drafter.draft(history, 6) == [3, 4]
    drafter.accept(1)
    # The key stays recorded at 5 although it occurs later too; its draft is cut to the 1 token kept last.
    assert drafter.draft([*history, 6, 3, 7, 7, 5], 6) == [3]
    assert drafter.draft(history, 8) == []  # [5, 8] never occurred
    assert NgramMap(NgramSizes(size_n=2, size_m=2), key_only=True).draft(history[:5], 6) == []  # < 2n + m tokens


def test_ngram_map_k4v_drafts_a_dominant_continuation_once_the_key_was_seen_min_hits_times() -> None:
    history = [0, 7, 1, 7, 1, 7, 2, 3, 3, 3]
    # After 7: [1] twice, [2] once: [1] is at least twice as frequent as the others together.
    assert NgramMap(NgramSizes(size_n=1, size_m=1), key_only=False).draft(history, 7) == [1]
    assert NgramMap(NgramSizes(size_n=1, size_m=1), key_only=True).draft(history, 7) == [2]  # just the latest
    twice = NgramMap(NgramSizes(size_n=1, size_m=1, min_hits=2), key_only=False)
    assert twice.draft(history, 7) == []  # seen once so far
    assert twice.draft(history, 7) == [1]
    tied = [0, 7, 1, 7, 2, 7, 2, 7, 1, 3, 3, 3]  # [1] twice, [2] twice: none dominates
    assert NgramMap(NgramSizes(size_n=1, size_m=1), key_only=False).draft(tied, 7) == []
