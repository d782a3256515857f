"""A trace of request shapes, for replaying routing policies offline (:mod:`.simulate`, bench/replay_trace.py).

What is recorded is the shape, never the content: the route key, and for every message boundary a hash of
the messages up to it with their length in characters (the places an LFM2 cache can be reused from), plus
``max_tokens``. :class:`TraceRecorder` is an opt-in ASGI middleware writing one JSON line per generation
request; :func:`request_shape` is the pure part, shared with tests and the synthetic traces.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .routing import route_key

#: The generation routes a trace covers (the others do not use the prompt cache).
TRACED_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/chat/completions",
        "/v1/completions",
        "/completions",
        "/completion",
        "/v1/messages",
        "/v1/responses",
    }
)


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One request: when (seconds from the trace's start), its key, its reusable prefixes, its reply budget.

    ``boundaries`` lists ``(hash, n_chars)`` of each message prefix, shortest first; a completion prompt has one.
    """

    t: float
    key: str
    boundaries: tuple[tuple[str, int], ...]
    max_tokens: int | None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> TraceRecord:
        data = json.loads(line)
        return cls(data["t"], data["key"], tuple((str(h), int(n)) for h, n in data["boundaries"]), data["max_tokens"])


def request_shape(t: float, headers: Mapping[str, str], body: Mapping[str, Any]) -> TraceRecord:
    """The record of one request body (no content kept: hashes and lengths only)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        prompt = body.get("prompt", "")
        messages = [{"role": "user", "content": prompt if isinstance(prompt, str) else json.dumps(prompt)}]
    boundaries, digest, n_chars = [], hashlib.sha256(), 0
    for message in messages:
        text = json.dumps(message, sort_keys=True, ensure_ascii=False, default=str)
        digest.update(text.encode())
        n_chars += len(text)
        boundaries.append((digest.copy().hexdigest()[:16], n_chars))
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens", body.get("n_predict")))
    return TraceRecord(
        round(t, 4), route_key(headers, body), tuple(boundaries), max_tokens if isinstance(max_tokens, int) else None
    )


class TraceRecorder:
    """ASGI middleware: appends a :class:`TraceRecord` line to ``path`` for each generation request, then passes
    the request on untouched (its body replayed to the app)."""

    def __init__(self, app: ASGIApp, path: str | Path) -> None:
        self.app = app
        self.path = Path(path)
        self._lock = threading.Lock()
        self._start = time.monotonic()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in TRACED_PATHS:
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        chunks: list[bytes] = []
        while True:
            message = await receive()
            messages.append(message)
            chunks.append(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        self._record(scope, b"".join(chunks))
        replay = iter(messages)

        async def replayed() -> Message:
            return next(replay, None) or await receive()

        await self.app(scope, replayed, send)

    def _record(self, scope: Scope, raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            return  # the app answers the bad body; there is no shape to record
        if not isinstance(body, dict):
            return
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        record = request_shape(time.monotonic() - self._start, headers, body)
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(record.to_json() + "\n")
