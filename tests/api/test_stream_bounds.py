"""The resumable streams' bounds: the sessions kept (a count, those finished first let go first, a running one
never; and the 300 s age), the ids a lookup answers for, and each let-go counted in /metrics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from lfmserve.api.monitoring import prometheus_text
from lfmserve.api.stream_sessions import LOOKUP_MAX_IDS, StreamSessions
from lfmserve.settings import Settings
from tests.conftest import ServerThread


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _metrics(n_kept: int, n_expired: int, n_dropped: int, n_ids_dropped: int) -> str:
    return (
        "# HELP lfmserve:stream_sessions Resumable stream sessions kept.\n"
        "# TYPE lfmserve:stream_sessions gauge\n"
        f"lfmserve:stream_sessions {n_kept}\n"
        "# HELP lfmserve:stream_sessions_expired_total Finished stream sessions forgotten for their age.\n"
        "# TYPE lfmserve:stream_sessions_expired_total counter\n"
        f"lfmserve:stream_sessions_expired_total {n_expired}\n"
        "# HELP lfmserve:stream_sessions_dropped_total Stream sessions forgotten early, for their count.\n"
        "# TYPE lfmserve:stream_sessions_dropped_total counter\n"
        f"lfmserve:stream_sessions_dropped_total {n_dropped}\n"
        "# HELP lfmserve:stream_lookup_ids_dropped_total Lookup ids ignored, past the bound.\n"
        "# TYPE lfmserve:stream_lookup_ids_dropped_total counter\n"
        f"lfmserve:stream_lookup_ids_dropped_total {n_ids_dropped}\n"
    )


def _kept(sessions: StreamSessions, *keys: str) -> list[str]:
    return [key for key in keys if sessions.get(key) is not None]


def test_past_the_count_the_sessions_that_finished_first_go_first() -> None:
    clock = Clock()
    sessions = StreamSessions(max_sessions=3, clock=clock)
    late, early = sessions.open("late"), sessions.open("early")
    early.finish()
    clock.now += 1
    late.finish()
    for key in ("c", "d"):
        sessions.open(key).finish()
    assert _kept(sessions, "late", "early", "c", "d") == ["late", "c", "d"]
    sessions.open("e")
    assert _kept(sessions, "late", "c", "d", "e") == ["c", "d", "e"]  # finished together: the first started goes
    assert sessions.n_dropped == 2


def test_a_running_session_is_never_dropped_for_the_count() -> None:
    sessions = StreamSessions(max_sessions=2, clock=Clock())
    running = [sessions.open(f"r{i}") for i in range(3)]
    assert len(sessions) == 3 and sessions.n_dropped == 0  # each belongs to a generation running now
    running[1].finish()
    sessions.open("r3")
    assert _kept(sessions, "r0", "r1", "r2", "r3") == ["r0", "r2", "r3"]
    assert not running[0].cancelled.is_set() and not running[2].cancelled.is_set()
    assert prometheus_text(sessions.metrics()) == _metrics(3, 0, 1, 0)


def test_256_sessions_are_kept_by_default_and_the_age_bound_is_counted_apart() -> None:
    clock = Clock()
    sessions = StreamSessions(clock=clock)
    for i in range(300):
        sessions.open(f"c{i}").finish()
        clock.now += 0.5
    assert _kept(sessions, *(f"c{i}" for i in range(300))) == [f"c{i}" for i in range(44, 300)]
    assert prometheus_text(sessions.metrics()) == _metrics(256, 0, 44, 0)
    clock.now += 300
    assert prometheus_text(sessions.metrics()) == _metrics(0, 256, 44, 0)


def test_a_lookup_answers_for_its_first_1024_ids_and_counts_the_rest() -> None:
    sessions = StreamSessions(max_sessions=2000, clock=Clock())
    for key in ("c-0::org/m:Q8_0", "c-1023", "c-1024", "c-1499"):
        sessions.open(key)
    asked = [f"c-{i}" for i in range(1500)]
    assert [s.conversation_id for s in sessions.matching(asked)] == ["c-0::org/m:Q8_0", "c-1023"]
    assert LOOKUP_MAX_IDS == 1024 and sessions.n_lookup_ids_dropped == 476
    assert [s.conversation_id for s in sessions.matching(asked[1024:])] == ["c-1024", "c-1499"]
    assert prometheus_text(sessions.metrics()) == _metrics(4, 0, 0, 476)


def test_a_lookup_id_matches_a_key_up_to_any_of_its_separators() -> None:
    sessions = StreamSessions(clock=Clock())
    sessions.open("a:::b::c")
    asked = ["a", "a:", "a:::b", "a:::b::c", "a::", "b", ""]
    assert [s.conversation_id for s in sessions.matching(asked)] == ["a:::b::c"] * 4


def test_the_bounds_show_in_the_servers_metrics(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    server = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1, metrics=True))
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True}
    headers = {"X-Conversation-Id": "c-1023"}
    assert httpx.post(server.url + "/v1/chat/completions", json=body, headers=headers, timeout=60).status_code == 200
    asked = {"conversation_ids": [f"c-{i}" for i in range(1500)]}
    (found,) = httpx.post(server.url + "/v1/streams/lookup", json=asked, timeout=10).json()
    assert (found["conversation_id"], found["is_done"]) == ("c-1023", True)
    assert _metrics(1, 0, 0, 476) in httpx.get(server.url + "/metrics", timeout=10).text
