"""Server-sent events: chunks framed as ``data: {json}``, errors as an ``error:`` event, and a disconnect watch.

Anthropic's streams also name each event (``event: message_start``) and send an error as ``event: error``
with llama-server's error object as its data (``named_events``). A stream silent for ``--sse-ping-interval``
seconds (a long prompt, a slow model) gets llama-server's ping, a comment line clients skip, since some clients
(undici's fetch) give up on a connection that sends nothing for a while.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse

from ..errors import LfmError, RequestCancelled

T = TypeVar("T")
logger = logging.getLogger(__name__)
#: llama-server's keep-alive: an SSE comment line, which clients skip.
PING = b":\n\n"


def sse(
    chunks: AsyncIterator[dict[str, Any]],
    *,
    done_marker: bool,
    named_events: bool = False,
    error_as_data: bool = False,
    ping_s: float = -1,
) -> StreamingResponse:
    """Stream ``chunks``; ``done_marker`` ends with ``data: [DONE]`` (OpenAI's streams, not llama-server's native);
    ``named_events`` puts each chunk's ``type`` on an ``event:`` line before it (Anthropic's streams);
    ``error_as_data`` sends an error as ``data: {"error": ...}`` (llama-server's Responses streams: OpenAI's
    clients raise it); ``ping_s``: ``--sse-ping-interval`` (0 or less: no pings)."""

    async def frames() -> AsyncIterator[bytes]:
        try:
            async for chunk in _pinged(chunks, ping_s):
                if chunk is None:
                    yield PING
                    continue
                name = b"event: " + str(chunk["type"]).encode() + b"\n" if named_events else b""
                yield name + b"data: " + json_line(chunk) + b"\n\n"
        except RequestCancelled:
            return
        except LfmError as exc:
            yield error_frame(exc, named_events=named_events, error_as_data=error_as_data)
            return
        except Exception as exc:  # a bug: the stream still ends with an error event, not a cut connection
            logger.exception("unexpected error in a stream")
            error = LfmError(f"Internal server error: {type(exc).__name__}")
            yield error_frame(error, named_events=named_events, error_as_data=error_as_data)
            return
        if done_marker:
            yield b"data: [DONE]\n\n"

    return StreamingResponse(
        frames(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


async def _pinged(chunks: AsyncIterator[T], ping_s: float) -> AsyncIterator[T | None]:
    """``chunks``, with a None each time ``ping_s`` seconds pass without one. The next chunk is awaited in a
    task, so waiting can time out without cancelling it (about 10 us a chunk); leaving early cancels it, which
    ends the generation as a disconnect does."""
    if ping_s <= 0:
        async for chunk in chunks:
            yield chunk
        return
    step: asyncio.Future[T] | None = None
    try:
        while True:
            step = asyncio.ensure_future(anext(chunks))
            while not (await asyncio.wait({step}, timeout=ping_s))[0]:
                yield None
            try:
                chunk = step.result()
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        if step is not None:
            step.cancel()


def error_frame(error: LfmError, *, named_events: bool, error_as_data: bool) -> bytes:
    """The event that ends a stream with ``error``, shaped as :func:`sse`'s flags say; a router ends a child's
    stream it relays with the same event, so a client sees one shape whichever server cut its stream."""
    if error_as_data:
        return b"data: " + json.dumps(error.to_body()).encode() + b"\n\n"
    if named_events:  # llama-server's Anthropic streams: the error object itself is the event's data
        return b"event: error\ndata: " + json.dumps(error.to_body()["error"]).encode() + b"\n\n"
    return b"error: " + json.dumps(error.to_body()).encode() + b"\n\n"


#: Characters JSON leaves unescaped but ``str.splitlines`` (httpx's ``iter_lines``) splits lines at.
_LINE_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def json_line(chunk: dict[str, Any]) -> bytes:
    """A chunk as one line of JSON: text unescaped (smaller), except the characters that would break the line."""
    text = json.dumps(chunk, ensure_ascii=False)
    for char, escaped in _LINE_BREAKS.items():
        if char in text:
            text = text.replace(char, escaped)
    return text.encode()


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run ``work`` but give up (cancelling it, hence the generation) when the client disconnects."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    return await unless(disconnected(), work, RequestCancelled("client disconnected"))


async def unless(stop: Awaitable[object], work: Awaitable[T], error: LfmError) -> T:
    """Run ``work`` but give up (cancelling it) and raise ``error`` when ``stop`` completes first: a client's
    disconnect, or a router's stop of a conversation whose request waits for its model."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(stop)
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        raise error
    return task.result()
