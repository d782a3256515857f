"""A request the router passes to a child, on a connection of its own, and the child's answer as it arrives.

The router relays every token a child streams, so what it spends on a chunk is spent on every token, on a core the
child's decode also needs (docs/benchmarks.md, Router, has the figures). Read through httpx, each chunk passed
through httpcore, h11 and an anyio cancel scope. Here the answer is read by an asyncio protocol whose parser is
httptools (llhttp, in C): the chunked framing is undone in C, and everything that arrived since the relay's last
write goes out in one write. A stream whose tokens come faster than the relay's gap is read once a gap: the child's
writes wait in the socket meanwhile, so one wake-up of the router carries several tokens.

Each request gets a fresh loopback connection, closed when its answer ends (``Connection: close``): no pool of
idle connections to keep, to find closed by the child, or to retry on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import h11
import httptools

#: How much of an answer waits in the router before it stops reading from the child (the client reads slowly).
_HELD_BYTES = 1 << 20


class UpstreamError(ConnectionError):
    """The child's connection failed, or closed before its answer ended."""


class Upstream(asyncio.Protocol):
    """One request's connection to a child: its answer's status and headers once they arrive, then its body."""

    def __init__(self, request: list[bytes], *, head_only: bool) -> None:
        #: The request's head and body, until they are written (a body of images is not kept for the answer's life).
        self._request = request
        self._head_only = head_only
        #: The answer's head is being read: its header lines are the answer's (a chunked body's trailers are not).
        self._in_head = True
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self._head: asyncio.Future[None] = loop.create_future()
        # A request cancelled while it connects leaves the head's failure unawaited: retrieved here, not logged.
        self._head.add_done_callback(lambda head: head.cancelled() or head.exception())
        self._waiter: asyncio.Future[None] | None = None
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._paused = False
        self._ended = False
        self._error: UpstreamError | None = None
        self.status_code = 0
        #: The answer's headers, names lower-cased, in the order the child sent them.
        self.headers: list[tuple[str, str]] = []

    # The protocol's side, called by the event loop.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio's classes
        self._transport.writelines(self._request)
        self._request = []

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"the child's answer could not be read: {exc}"))
            return
        if self._held_bytes > _HELD_BYTES and self._transport is not None and not self._paused:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._ended:
            self._fail(UpstreamError(f"the child closed the connection{f': {exc}' if exc else ''}"))

    # The parser's side, called from feed_data.

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._in_head:
            self.headers.append((name.decode("latin-1").lower(), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        self.status_code = self._parser.get_status_code()
        if self.status_code < 200:  # an interim answer (100 Continue): the parser reads the final one next
            self.headers.clear()
            return
        self._in_head = False
        if self._head_only:  # a HEAD's answer has no body, whatever its content-length says
            self._end()
        if not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._held.append(body)
        self._held_bytes += len(body)

    def on_message_complete(self) -> None:
        if not self._in_head:  # not an interim answer's end
            self._end()

    # The relay's side.

    async def answered(self) -> None:
        """Wait for the answer's status and headers; :class:`UpstreamError` if the connection ends first."""
        await self._head

    async def body(self, gap_s: float = 0.0) -> AsyncIterator[bytes]:
        """The answer's body, each piece everything that arrived since the last; :class:`UpstreamError` once what
        arrived before the connection failed has been given.

        Pieces at least ``gap_s`` apart: one that arrives sooner waits out the gap with the child unread, so what
        the child writes meanwhile comes in one read for the next piece. A piece waits at most two gaps."""
        loop = asyncio.get_running_loop()
        last = -gap_s
        while True:
            if self._held:
                wait = last + gap_s - loop.time()
                if wait > 0 and self._reading():
                    await self._unread_for(wait)
                last = loop.time()
                piece = b"".join(self._held) if len(self._held) > 1 else self._held[0]
                self._held.clear()
                self._held_bytes = 0
                if self._paused and self._transport is not None:
                    self._paused = False
                    self._transport.resume_reading()
                yield piece
            elif self._ended:
                return
            elif self._error is not None:
                raise self._error
            else:
                self._waiter = loop.create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None

    def _reading(self) -> bool:
        """Still reading the answer: not ended, not failed, not paused for a slow client."""
        return not (self._ended or self._error or self._paused)

    async def _unread_for(self, seconds: float) -> None:
        assert self._transport is not None
        self._transport.pause_reading()
        try:
            await asyncio.sleep(seconds)
        finally:
            if not self._transport.is_closing():
                self._transport.resume_reading()

    def close(self) -> None:
        """Close the connection; a body still being read then fails as if the child had closed it."""
        if self._transport is not None:
            self._transport.abort()

    def _end(self) -> None:
        self._ended = True
        if self._transport is not None:
            self._transport.close()

    def _fail(self, error: UpstreamError) -> None:
        if self._error is None:
            self._error = error
        if not self._head.done():
            self._head.set_exception(error)
        self._wake()
        if self._transport is not None:
            self._transport.abort()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


async def send(host: str, port: int, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> Upstream:
    """Send the request and wait for its answer's status and headers; :class:`UpstreamError` when the child cannot
    be reached or closes before answering."""
    request = _serialize(f"{host}:{port}", method, target, headers, body)
    upstream = Upstream(request, head_only=method == "HEAD")
    try:
        await asyncio.get_running_loop().create_connection(lambda: upstream, host, port)
    except OSError as exc:
        raise UpstreamError(f"the child could not be reached: {exc}") from exc
    try:
        await upstream.answered()
    except BaseException:
        upstream.close()
        raise
    return upstream


def _serialize(authority: str, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> list[bytes]:
    """The request's head, written by h11, which refuses a header or target that would split the message, then its
    body as it came. Values go as latin-1 bytes, as the router's server read them from the client."""
    fields = [("host", authority), *headers, ("content-length", str(len(body))), ("connection", "close")]
    raw = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in fields]
    head = h11.Connection(h11.CLIENT).send(h11.Request(method=method, target=target.encode("latin-1"), headers=raw))
    return [head or b"", body]
