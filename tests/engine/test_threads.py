"""The thread tuner: the count each decode uses, from the decodes' own times (scripted here, in seconds)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from lfmserve.engine.threads import ThreadTuner, candidate_counts, size_class


def drive(tuner: ThreadTuner, decodes: int, seconds: Callable[[int], float], n_tokens: int = 1) -> list[int]:
    """The count picked for each of ``decodes`` decodes of ``n_tokens``, each taking ``seconds(count)``."""
    picked = []
    for _ in range(decodes):
        count = tuner.pick(n_tokens)
        tuner.observe(n_tokens, count, seconds(count) * n_tokens)
        picked.append(count)
    return picked


QUIET = {2: 0.020, 1: 0.038}.__getitem__  # Gemma-3-270M's decode on 2 cores, quiet (46 and 26 tokens/s)
BUSY = {2: 0.250, 1: 0.040}.__getitem__  # beside one CPU-bound process (4 and 25 tokens/s)


def test_the_counts_tried_are_all_one_less_half_and_one() -> None:
    assert candidate_counts(1) == (1,)
    assert candidate_counts(2) == (2, 1)
    assert candidate_counts(4) == (4, 3, 2, 1)
    assert candidate_counts(16) == (16, 15, 8, 1)
    assert candidate_counts(16, adaptive=False) == (16,)


def test_without_adaptation_every_decode_uses_every_thread() -> None:
    tuner = ThreadTuner(2, 4, adaptive=False)
    assert set(drive(tuner, 300, BUSY)) == {2}
    assert set(drive(tuner, 300, lambda count: {4: 1.0}[count], n_tokens=64)) == {4}


def test_batches_are_measured_by_size_class() -> None:
    assert [size_class(n) for n in (1, 2, 3, 4, 7, 8, 127, 128, 4096)] == [1, 2, 2, 3, 3, 4, 7, 8, 8]


def test_on_a_quiet_machine_fewer_threads_are_tried_ever_more_rarely() -> None:
    tuner = ThreadTuner(2, 2)
    picked = drive(tuner, 2000, QUIET)
    tries = [i for i, count in enumerate(picked) if count == 1]
    assert tries == [8, 25, 58, 123, 252, 509, 766, 1023, 1280, 1537, 1794]
    assert tuner.kept(1) == 2


def test_beside_a_busy_process_one_thread_is_kept_after_the_first_try(caplog: pytest.LogCaptureFixture) -> None:
    tuner = ThreadTuner(2, 2)
    with caplog.at_level(logging.INFO, logger="lfmserve.engine.threads"):
        picked = drive(tuner, 100, BUSY)
    assert picked[:9] == [2] * 8 + [1]
    assert tuner.kept(1) == 1
    assert [i for i, count in enumerate(picked) if count == 2 and i > 8] == [17, 34, 67]
    assert caplog.messages == ["decoding batches of 1 token on 1 thread instead of 2: 40.0 ms a token against 250.0 ms"]


def test_a_machine_that_gets_busy_is_noticed_within_a_few_decodes() -> None:
    tuner = ThreadTuner(2, 2)
    drive(tuner, 1000, QUIET)  # the tries are 256 decodes apart by now
    picked = drive(tuner, 10, BUSY)
    assert picked == [2, 1, 1, 1, 1, 1, 1, 1, 1, 1]  # the first slow decode lifts 2's average past 1.5x its best
    assert tuner.kept(1) == 1


def test_a_machine_that_gets_quiet_again_gets_every_thread_back() -> None:
    tuner = ThreadTuner(2, 2)
    drive(tuner, 1000, BUSY)
    assert tuner.kept(1) == 1
    picked = drive(tuner, 300, QUIET)
    first_two = picked.index(2)
    assert first_two < 256 and tuner.kept(1) == 2 and set(picked[first_two:]) <= {2, 1}
    assert picked[first_two + 1 : first_two + 9] == [2] * 8


def test_batches_take_the_batch_thread_count_and_keep_their_own_measurements() -> None:
    tuner = ThreadTuner(2, 4)
    drive(tuner, 20, lambda count: {4: 0.010, 3: 0.004, 2: 0.011, 1: 0.02}[count], n_tokens=64)
    assert tuner.kept(64) == 3  # the first try of a count but all: one less
    assert tuner.kept(100) == 3  # the same size class
    assert tuner.kept(1) == 2  # single tokens: untouched, from -t
    assert tuner.kept(8) == 4  # another size class: from -tb


def test_a_count_is_chosen_once_another_was_timed_against_it() -> None:
    tuner = ThreadTuner(2, 2)
    drive(tuner, 8, QUIET)
    assert (tuner.kept(1), tuner.chosen(1)) == (2, None)  # -t as given: no other count timed yet
    drive(tuner, 1, QUIET)  # the first try, of one thread, loses
    assert tuner.chosen(1) == 2
    busy = ThreadTuner(2, 2)
    drive(busy, 9, BUSY)
    assert busy.chosen(1) == 1 and busy.chosen(8) is None
    assert ThreadTuner(2, 2, adaptive=False).chosen(1) == 2  # nothing else is ever tried: -t is the choice


def drive_mixed(tuner: ThreadTuner, rounds: int, seconds: Callable[[int], float], sizes: tuple[int, ...]) -> list[int]:
    """The counts picked for the decodes of ``sizes[-1]`` tokens, over ``rounds`` rounds of one decode of each size."""
    picked = []
    for _ in range(rounds):
        for n_tokens in sizes:
            count = tuner.pick(n_tokens)
            tuner.observe(n_tokens, count, seconds(count) * n_tokens)
        picked.append(count)
    return picked


def test_while_single_tokens_keep_every_thread_larger_batches_are_not_tried_on_fewer() -> None:
    tuner = ThreadTuner(2, 2)
    assert set(drive_mixed(tuner, 1000, QUIET, (1, 24))) == {2}
    assert tuner.chosen(1) == 2 and tuner.chosen(24) is None  # single tokens tried one thread; 24 tokens never did


def test_once_single_tokens_keep_one_thread_larger_batches_try_it_and_keep_it() -> None:
    tuner = ThreadTuner(2, 2)
    drive_mixed(tuner, 100, QUIET, (1, 24))
    picked = drive_mixed(tuner, 100, BUSY, (1, 24))
    assert tuner.kept(1) == 1
    assert picked.index(1) <= 2  # the single tokens' first slow decode brings their try forward, then the batch's
    assert tuner.kept(24) == 1 and picked[-1] == 1


def test_larger_batches_try_fewer_threads_themselves_without_recent_single_tokens() -> None:
    alone = ThreadTuner(2, 2)
    tries = [i for i, count in enumerate(drive(alone, 600, QUIET, n_tokens=4)) if count == 1]
    assert tries == [8, 25, 58, 123, 252, 509]  # no smaller batch speaks for the machine: as single tokens do
    stale = ThreadTuner(2, 2)
    drive_mixed(stale, 20, QUIET, (1, 4))
    assert stale.chosen(1) == 2
    later = drive(stale, 600, QUIET, n_tokens=4)
    assert later[:64] == [2] * 64  # the single tokens' verdict holds for 64 decodes
    assert 1 in later[64:]


def test_a_batch_thread_count_of_its_own_is_tried_whatever_single_tokens_keep() -> None:
    tuner = ThreadTuner(2, 4)
    picked = drive_mixed(tuner, 20, lambda count: {4: 0.010, 3: 0.004, 2: 0.011, 1: 0.02}[count], (1, 64))
    assert tuner.kept(1) == 2 and tuner.kept(64) == 3 and 3 in picked
