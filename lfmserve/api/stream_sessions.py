"""llama-server's resumable streams (its ``server-stream.cpp``): each conversation's SSE bytes, kept past a client
that disconnects, for ``GET /v1/stream`` to replay and then follow.

A streamed completion that carries ``X-Conversation-Id`` writes every byte it sends into that conversation's
:class:`StreamSession` (:mod:`~lfmserve.api.resumable` does it; the routes are :mod:`~lfmserve.api.streams`), so
a client that reloads its page reattaches from the offset it had reached. One conversation has at most one
session: a newer one cancels the one before (its generation stops, its readers end). A session keeps the last
4 MiB (older bytes are dropped, and an offset below them is lost), and a finished one is dropped 300 s after it
finished. llama-server drops those on a 60 s timer; here they go when the sessions are next used, so nothing runs
in the background.

Every client can start sessions and name ids, so both are bounded, which llama-server's are not: at most
:data:`MAX_SESSIONS` sessions are kept (past it, those that finished first are dropped first; a running one never
is, as it belongs to a generation running now), and a lookup answers for the first :data:`LOOKUP_MAX_IDS` ids it
names. What each bound let go is counted in ``/metrics`` (:meth:`StreamSessions.metrics`).

Example::

    sessions = StreamSessions()
    session = sessions.open("conv-1")  # a streamed answer starts
    session.append(b"data: {...}\\n\\n")
    session.finish()
    async for chunk in sessions.get("conv-1").read_from(0): ...
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from .monitoring import Metric, counter

logger = logging.getLogger(__name__)

#: The request header that makes a streamed completion resumable (matched in any case).
CONVERSATION_HEADER = "x-conversation-id"
#: How long a finished session stays replayable (llama-server's ``STREAM_SESSION_TTL_SECONDS``).
SESSION_TTL_S = 300.0
#: The bytes a session keeps; older ones are dropped first (``STREAM_SESSION_MAX_BYTES``).
SESSION_MAX_BYTES = 4 * 1024 * 1024
#: The sessions kept. Each holds up to 4 MiB, though a typical answer's stream is some 100 KiB (about 250 bytes
#: of SSE a token): 256 bound the worst case to 1 GiB, and keep every answer of a server finishing one a second
#: replayable for its 300 s.
MAX_SESSIONS = 256
#: The ids one lookup answers for; the ones past it are ignored. llama-server's web UI names every conversation
#: it holds, the most recently changed first (a running stream's is among them), so those ignored are the oldest.
LOOKUP_MAX_IDS = 1024


class StreamSession:
    """One conversation's stream: the bytes written so far (the last ``max_bytes`` of them), whether it has
    finished, and whether a stop cancelled it (which its producer watches)."""

    def __init__(self, conversation_id: str, max_bytes: int, clock: Callable[[], float]) -> None:
        self.conversation_id = conversation_id
        self.started_at = int(clock())
        #: Unix seconds when it finished; 0 while it runs.
        self.completed_at = 0
        self.done = False
        #: Bytes dropped from the front to keep within ``max_bytes``: offsets below this are lost.
        self.dropped_bytes = 0
        self.cancelled = asyncio.Event()
        self._buffer = bytearray()
        self._max_bytes = max_bytes
        self._clock = clock
        self._changed = asyncio.Event()

    @property
    def total_bytes(self) -> int:
        """Every byte ever written, dropped ones included: the offset the next byte will have."""
        return self.dropped_bytes + len(self._buffer)

    def append(self, data: bytes) -> bool:
        """Add ``data`` at the end (dropping the oldest bytes past the cap); False once the session has finished."""
        if self.done:
            return False
        if not data:
            return True
        if len(data) >= self._max_bytes:  # one chunk over the cap: only its tail fits
            self.dropped_bytes += len(self._buffer) + len(data) - self._max_bytes
            self._buffer = bytearray(data[len(data) - self._max_bytes :])
        else:
            overflow = len(self._buffer) + len(data) - self._max_bytes
            if overflow > 0:
                del self._buffer[:overflow]
                self.dropped_bytes += overflow
            self._buffer += data
        self._wake()
        return True

    def finish(self) -> None:
        """No more bytes will come: readers end once they have read everything (idempotent)."""
        if not self.done:
            self.done = True
            self.completed_at = int(self._clock())
            self._wake()

    def cancel(self) -> None:
        """Tell the producer to stop its generation (a stop, or a newer stream of the same conversation)."""
        self.cancelled.set()

    async def read_from(self, offset: int) -> AsyncIterator[bytes]:
        """The bytes from ``offset`` on, as they are written, until the session finishes; a reader that falls
        behind the dropped bytes ends there (llama-server's ``OFFSET_LOST``)."""
        while offset >= self.dropped_bytes:
            end = self.total_bytes
            if offset < end:
                chunk = bytes(self._buffer[offset - self.dropped_bytes :])
                offset = end
                yield chunk
                continue
            if self.done:
                return
            await self._changed.wait()

    def describe(self) -> dict[str, Any]:
        """The session as ``POST /v1/streams/lookup`` lists it."""
        return {
            "conversation_id": self.conversation_id,
            "is_done": self.done,
            "total_bytes": self.total_bytes,
            "started_at": self.started_at,
            "completed_at": self.completed_at,
        }

    def _wake(self) -> None:
        """Wake the readers waiting for bytes (each wait takes the event current when it began)."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


class StreamSessions:
    """Every live session by conversation id, one per conversation; used from the event loop only."""

    def __init__(
        self,
        *,
        ttl_s: float = SESSION_TTL_S,
        max_bytes: int = SESSION_MAX_BYTES,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self.max_sessions = max_sessions
        self._clock = clock
        #: In the order they started (a conversation's newer session starts at the end).
        self._sessions: dict[str, StreamSession] = {}
        #: Finished sessions let go after :attr:`ttl_s`, and early for :attr:`max_sessions`; lookup ids ignored.
        self.n_expired = 0
        self.n_dropped = 0
        self.n_lookup_ids_dropped = 0

    def open(self, conversation_id: str) -> StreamSession:
        """A new session for the conversation, replacing (and cancelling) the one it had."""
        self._expire()
        fresh = StreamSession(conversation_id, self.max_bytes, self._clock)
        previous = self._sessions.pop(conversation_id, None)
        self._sessions[conversation_id] = fresh
        if previous is not None:
            logger.debug("stream session %s replaced by a newer request", conversation_id)
            _end(previous)
        self._drop_finished(len(self._sessions) - self.max_sessions)
        return fresh

    def get(self, conversation_id: str) -> StreamSession | None:
        self._expire()
        return self._sessions.get(conversation_id)

    def close(self, conversation_id: str) -> bool:
        """Cancel the conversation's generation and forget its session; False when it had none."""
        session = self._sessions.pop(conversation_id, None)
        if session is None:
            return False
        _end(session)
        return True

    def __len__(self) -> int:
        """The sessions kept now (those past their 300 s are let go first)."""
        self._expire()
        return len(self._sessions)

    def matching(self, conversation_ids: Sequence[str]) -> list[StreamSession]:
        """The sessions of the first :data:`LOOKUP_MAX_IDS` ids asked about, in their order: each id matches its own
        session and every ``<id>::<model>`` one (the per-model sessions a router's web UI opens). Nothing else is
        ever listed."""
        self._expire()
        wanted = conversation_ids[:LOOKUP_MAX_IDS]
        self.n_lookup_ids_dropped += len(conversation_ids) - len(wanted)
        answering: dict[str, list[StreamSession]] = {}  # an index, so a lookup costs its ids plus the sessions
        for key, session in self._sessions.items():
            for name in _names(key):
                answering.setdefault(name, []).append(session)
        return [session for name in wanted for session in answering.get(name, ())]

    def metrics(self) -> list[Metric]:
        """What ``/metrics`` says of them: how many are kept, and how many each bound let go."""
        return [
            Metric("lfmserve:stream_sessions", "gauge", "Resumable stream sessions kept.", len(self)),
            counter("stream_sessions_expired", "Finished stream sessions forgotten for their age.", self.n_expired),
            counter("stream_sessions_dropped", "Stream sessions forgotten early, for their count.", self.n_dropped),
            counter("stream_lookup_ids_dropped", "Lookup ids ignored, past the bound.", self.n_lookup_ids_dropped),
        ]

    def _expire(self) -> None:
        cutoff = self._clock() - self.ttl_s
        for key, session in list(self._sessions.items()):
            if session.done and session.completed_at <= cutoff:
                del self._sessions[key]
                self.n_expired += 1

    def _drop_finished(self, n_excess: int) -> None:
        """Forget up to ``n_excess`` finished sessions, those that finished first (then started first) first."""
        if n_excess <= 0:
            return
        finished = sorted((session for session in self._sessions.values() if session.done), key=_completed_at)
        for session in finished[:n_excess]:
            logger.debug("stream session %s dropped: more than %d kept", session.conversation_id, self.max_sessions)
            del self._sessions[session.conversation_id]
        self.n_dropped += min(n_excess, len(finished))


def _completed_at(session: StreamSession) -> int:
    return session.completed_at


def _names(key: str) -> Iterator[str]:
    """The ids a session's key answers a lookup for: itself, and its part before each ``::``."""
    yield key
    at = key.find("::")
    while at != -1:
        yield key[:at]
        at = key.find("::", at + 1)


def _end(session: StreamSession) -> None:
    """Cancel the session's producer first, so it writes no more, then wake its readers for the end."""
    session.cancel()
    session.finish()
