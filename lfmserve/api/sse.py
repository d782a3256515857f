"""Server-sent events: chunks framed as ``data: {json}``, errors as an ``error:`` event, and a disconnect watch."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse

from ..errors import LfmError, RequestCancelled

T = TypeVar("T")


def sse(chunks: AsyncIterator[dict[str, Any]], *, done_marker: bool) -> StreamingResponse:
    """Stream ``chunks``; ``done_marker`` ends with ``data: [DONE]`` (OpenAI's streams, not llama-server's native)."""

    async def frames() -> AsyncIterator[bytes]:
        try:
            async for chunk in chunks:
                yield b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"
        except RequestCancelled:
            return
        except LfmError as exc:
            yield b"error: " + json.dumps(exc.to_body()).encode() + b"\n\n"
            return
        if done_marker:
            yield b"data: [DONE]\n\n"

    return StreamingResponse(
        frames(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run ``work`` but give up (cancelling it, hence the generation) when the client disconnects."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        raise RequestCancelled("client disconnected")
    return task.result()
