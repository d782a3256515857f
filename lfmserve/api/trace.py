"""Request shapes: the routing key of a request, and a trace of shapes for replaying routing policies offline.

What is recorded is the shape, never the content: the route key, and for every message boundary a hash of
the messages up to it with their length in characters (the places an LFM2 cache can be reused from), plus
``max_tokens``. :class:`TraceRecorder` is an opt-in ASGI middleware (``--trace-requests``) that writes one JSON
line per generation request; :func:`request_shape` is the pure part, shared with tests and the synthetic traces
(:mod:`lfmserve.scaleout.simulate`, bench/replay_trace.py).

Why a key from the body: an LFM2 replica reuses its cache only from checkpointed boundaries (system prompt,
message ends), so what must land on the same replica is a *conversation*: every turn re-sends the same tools,
template options and opening messages, and only appends. Hashing those (not the whole prompt) gives one key
per conversation that does not change from turn to turn. A client that knows better sends ``x-session-id``.
The scale-out layer ranks replicas by this key (:mod:`lfmserve.scaleout.routing`).
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


#: The header a client may send to name its conversation (Ray Serve reads the same one).
SESSION_HEADER = "x-session-id"
#: How much of a completion prompt the key covers: its opening, which a family of prompts shares.
PROMPT_PREFIX_CHARS = 512


def route_key(headers: Mapping[str, str], body: Mapping[str, Any]) -> str:
    """``session:<id>`` from ``x-session-id``; else a hash of the conversation's fixed part; "" for nothing to go by.

    Chat bodies (OpenAI chat, Anthropic messages, OpenAI Responses): tools, ``chat_template_kwargs`` and the
    messages up to and including the first user message (the system prompt included). Completions: the first
    :data:`PROMPT_PREFIX_CHARS` characters of the prompt.
    """
    for name, value in headers.items():
        if name.lower() == SESSION_HEADER and value:
            return f"session:{value}"
    opening = _opening(body)
    if opening is None:
        return ""
    fixed = {"tools": body.get("tools"), "template": body.get("chat_template_kwargs"), "opening": opening}
    digest = hashlib.sha256(json.dumps(fixed, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()
    return f"{'prompt' if isinstance(opening, str) else 'chat'}:{digest[:24]}"


def _opening(body: Mapping[str, Any]) -> list[Any] | str | None:
    """The part of the body that every turn repeats: the leading messages through the first user message."""
    messages = body.get("messages")
    if messages is None and isinstance(body.get("input"), list):
        messages = body["input"]  # OpenAI Responses
    if isinstance(messages, list) and messages:
        system = [{"role": "system", "content": body["system"]}] if body.get("system") else []  # Anthropic
        if body.get("instructions"):  # OpenAI Responses
            system.append({"role": "system", "content": body["instructions"]})
        head = [*system]
        for message in messages:
            head.append(message)
            if isinstance(message, Mapping) and message.get("role") == "user":
                break
        return head
    prompt = body.get("prompt", body.get("input"))
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return prompt[:PROMPT_PREFIX_CHARS]
    return None


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
