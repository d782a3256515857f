"""The producer side of llama-server's resumable streams: a streamed completion that carries ``X-Conversation-Id``
outlives its client.

ASGI middleware around the completion routes (llama-server's ``server_res_spipe``). When such a request's answer
starts as an SSE stream, its conversation gets a new :class:`~lfmserve.api.stream_sessions.StreamSession` (a running
one of the same conversation is cancelled), and every byte sent goes into it as well as to the client. A client
that disconnects then is no longer told to the route: the generation goes on into the session, for
``GET /v1/stream`` to replay. Only a stop (``DELETE /v1/stream``, or a newer request of the conversation) ends it
early, as a disconnect would; a client still reading then sees its stream end cleanly.

A whole (non-streamed) answer with the header also replaces the conversation's session, and keeps none, as in
llama-server. A request that fails leaves the sessions as they were: llama-server's does too when its body is
refused, before it reaches the generation.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .stream_sessions import CONVERSATION_HEADER, StreamSession, StreamSessions

#: llama-server's routes whose streams can be resumed (those that run its ``handle_completions_impl``).
COMPLETION_PATHS = frozenset(
    {
        "/completion",
        "/completions",
        "/v1/completions",
        "/chat/completions",
        "/v1/chat/completions",
        "/responses",
        "/v1/responses",
        "/audio/transcriptions",
        "/v1/audio/transcriptions",
        "/v1/messages",
        "/infill",
    }
)
_DISCONNECT: Message = {"type": "http.disconnect"}


class ResumableStreams:
    def __init__(self, app: ASGIApp, sessions: StreamSessions) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in COMPLETION_PATHS:
            conversation_id = Headers(scope=scope).get(CONVERSATION_HEADER, "")
            if conversation_id:
                await _Tee(self.sessions, conversation_id, receive, send).run(self.app, scope)
                return
        await self.app(scope, receive, send)


class _Tee:
    """One request's answer, written to its client and to its conversation's session."""

    def __init__(self, sessions: StreamSessions, conversation_id: str, receive: Receive, send: Send) -> None:
        self._sessions = sessions
        self._conversation_id = conversation_id
        self._receive = receive
        self._send = send
        self._session: StreamSession | None = None
        self._attached = asyncio.Event()
        self._pending: asyncio.Future[Message] | None = None
        self._client_gone = False
        self._completed = False

    async def run(self, app: ASGIApp, scope: Scope) -> None:
        try:
            await app(scope, self.receive, self.send)
            if self._session is not None and not self._completed and not self._client_gone:
                # Stopped: the route gave up without the stream's last message; the client's stream still ends.
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if self._pending is not None:
                self._pending.cancel()
            if self._session is not None:
                self._session.finish()

    async def receive(self) -> Message:
        """The client's messages, except that once the stream is the session's, the client's disconnect is kept
        from the route; a stop of the session reads as a disconnect (the route then ends the generation)."""
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._receive())
        stopped = asyncio.ensure_future(self._stopped())
        either: set[asyncio.Future[Any]] = {self._pending, stopped}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not self._pending.done():
            return _DISCONNECT
        message, self._pending = self._pending.result(), None
        if message["type"] == "http.disconnect" and self._session is not None:
            self._client_gone = True
            await self._stopped()
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._start(message)
        elif message["type"] == "http.response.body" and self._session is not None:
            if self._session.cancelled.is_set():
                return  # stopped: the route is being told; nothing more reaches the client
            self._session.append(message.get("body", b""))
            self._completed = not message.get("more_body", False)
        if self._client_gone:
            return
        try:
            await self._send(message)
        except OSError:  # a server that raises for a gone client: the session still fills
            if self._session is None:
                raise
            self._client_gone = True

    def _start(self, message: Message) -> None:
        if message["status"] != 200:
            return
        if Headers(raw=message.get("headers", [])).get("content-type", "").startswith("text/event-stream"):
            self._session = self._sessions.open(self._conversation_id)
            self._attached.set()
        else:
            self._sessions.close(self._conversation_id)

    async def _stopped(self) -> None:
        """Until the session this answer writes is cancelled (never, before there is one)."""
        await self._attached.wait()
        assert self._session is not None
        await self._session.cancelled.wait()
