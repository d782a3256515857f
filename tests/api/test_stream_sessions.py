"""The resumable streams' sessions without a server: the byte cap and its lost offsets, replacement, stops,
expiry, the lookup's matching, and ``from`` read as llama-server reads it."""

from __future__ import annotations

import asyncio

import pytest

from lfmserve.api.stream_sessions import StreamSession, StreamSessions
from lfmserve.api.streams import parse_offset, requested_conversations
from lfmserve.errors import InvalidRequest


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


async def _read(session: StreamSession, offset: int) -> bytes:
    return b"".join([chunk async for chunk in session.read_from(offset)])


def test_a_session_keeps_its_last_bytes_and_counts_the_dropped_ones() -> None:
    session = StreamSessions(max_bytes=8).open("c")
    for part in (b"abcde", b"fgh", b"ijk"):
        assert session.append(part)
    session.finish()
    assert (session.dropped_bytes, session.total_bytes) == (3, 11)
    assert asyncio.run(_read(session, 3)) == b"defghijk"
    assert asyncio.run(_read(session, 9)) == b"jk"
    assert asyncio.run(_read(session, 2)) == b""  # below the dropped bytes: the reader ends (offset lost)
    assert not session.append(b"late")  # finished: nothing more goes in


def test_one_chunk_over_the_cap_keeps_only_its_tail() -> None:
    session = StreamSessions(max_bytes=4).open("c")
    session.append(b"ab")
    session.append(b"0123456789")
    assert (session.dropped_bytes, session.total_bytes) == (8, 12)
    session.finish()
    assert asyncio.run(_read(session, 8)) == b"6789"


def test_a_reader_follows_the_live_bytes_until_the_session_finishes() -> None:
    async def scenario() -> tuple[bytes, bytes]:
        session = StreamSessions().open("c")
        session.append(b"one ")
        reader = asyncio.ensure_future(_read(session, 0))
        beyond = asyncio.ensure_future(_read(session, 100))  # an offset past the end waits, and gets nothing
        for part in (b"two ", b"three"):
            await asyncio.sleep(0.01)
            session.append(part)
        session.finish()
        return await reader, await beyond

    assert asyncio.run(scenario()) == (b"one two three", b"")


def test_a_newer_session_cancels_and_ends_the_one_it_replaces() -> None:
    sessions = StreamSessions()
    first = sessions.open("c")
    second = sessions.open("c")
    assert first.cancelled.is_set() and first.done
    assert not second.cancelled.is_set() and sessions.get("c") is second


def test_close_cancels_and_forgets_and_says_whether_there_was_one() -> None:
    sessions = StreamSessions()
    session = sessions.open("c")
    assert sessions.close("c") is True
    assert session.cancelled.is_set() and session.done and sessions.get("c") is None
    assert sessions.close("c") is False


def test_a_finished_session_expires_after_its_time_to_live_and_a_running_one_never() -> None:
    clock = Clock()
    sessions = StreamSessions(ttl_s=300, clock=clock)
    done = sessions.open("done")
    running = sessions.open("running")
    done.finish()
    assert done.describe() == {
        "conversation_id": "done",
        "is_done": True,
        "total_bytes": 0,
        "started_at": 1000,
        "completed_at": 1000,
    }
    clock.now += 299
    assert sessions.get("done") is done
    clock.now += 1
    assert sessions.get("done") is None
    clock.now += 10_000
    assert sessions.get("running") is running


def test_lookup_matches_each_id_asked_and_its_per_model_sessions_only() -> None:
    sessions = StreamSessions()
    for key in ("a", "a::org/m:Q8_0", "ab", "b", "b::m"):
        sessions.open(key)
    assert [s.conversation_id for s in sessions.matching(["a"])] == ["a", "a::org/m:Q8_0"]
    assert [s.conversation_id for s in sessions.matching(["b::m", "nope"])] == ["b::m"]
    assert sessions.matching([]) == []


@pytest.mark.parametrize(
    ("text", "offset"),
    [
        ("", 0),
        ("0", 0),
        ("42", 42),
        ("  42", 42),
        ("42abc", 42),
        ("+7", 7),
        ("-1", 2**64 - 1),
        ("18446744073709551615", 2**64 - 1),
    ],
)
def test_from_is_read_as_stoull_reads_it(text: str, offset: int) -> None:
    assert parse_offset(text) == offset


@pytest.mark.parametrize("text", ["abc", " ", "-", "x1", "18446744073709551616"])
def test_a_from_that_is_no_number_is_refused(text: str) -> None:
    with pytest.raises(InvalidRequest, match="Invalid 'from' offset"):
        parse_offset(text)


def test_lookup_bodies_are_read_leniently_but_must_be_json() -> None:
    assert requested_conversations(b'{"conversation_ids": ["a", "", 5, null, "b"]}') == ["a", "b"]
    assert requested_conversations(b'{"conversation_ids": "a"}') == []
    assert requested_conversations(b'["a"]') == []
    assert requested_conversations(b"{}") == []
    with pytest.raises(InvalidRequest, match="^invalid body: "):
        requested_conversations(b"")
