"""SSE framing: ``data:`` lines, the ``[DONE]`` marker of OpenAI's streams, an ``error:`` event, and silence
when cancelled."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lfmserve.api.sse import sse
from lfmserve.errors import LfmError, RequestCancelled, Unavailable


async def _chunks(items: list[dict[str, Any]], error: LfmError | None = None) -> AsyncIterator[dict[str, Any]]:
    for item in items:
        yield item
    if error is not None:
        raise error


def _body(chunks: AsyncIterator[dict[str, Any]], *, done_marker: bool) -> bytes:
    async def read() -> bytes:
        response = sse(chunks, done_marker=done_marker)
        assert response.media_type == "text/event-stream"
        assert (response.headers["cache-control"], response.headers["x-accel-buffering"]) == ("no-cache", "no")
        parts = [part async for part in response.body_iterator]
        return b"".join(p if isinstance(p, bytes) else p.encode() for p in parts)

    return asyncio.run(read())


@pytest.mark.parametrize(("done_marker", "tail"), [(True, b"data: [DONE]\n\n"), (False, b"")])
def test_chunks_are_data_lines_with_unescaped_text(done_marker: bool, tail: bytes) -> None:
    body = _body(_chunks([{"content": "héllo"}, {"n": 1}]), done_marker=done_marker)
    assert body == 'data: {"content": "héllo"}\n\ndata: {"n": 1}\n\n'.encode() + tail


def test_an_error_mid_stream_is_an_error_event_and_ends_the_stream() -> None:
    body = _body(_chunks([{"n": 1}], Unavailable("the server is shutting down")), done_marker=True)
    assert body == (
        b'data: {"n": 1}\n\n'
        b'error: {"error": {"code": 503, "message": "the server is shutting down", "type": "unavailable_error"}}\n\n'
    )


def test_a_cancelled_stream_ends_without_a_marker() -> None:
    assert _body(_chunks([{"n": 1}], RequestCancelled("client gone")), done_marker=True) == b'data: {"n": 1}\n\n'


def test_characters_that_split_lines_are_escaped_and_the_json_is_the_same() -> None:
    chunk = {"content": "a\u2028b\x85c\u2029d é"}
    body = _body(_chunks([chunk]), done_marker=False)
    assert body == 'data: {"content": "a\\u2028b\\u0085c\\u2029d é"}\n\n'.encode()
    line = body.decode().splitlines()[0]  # how httpx's iter_lines (Frigate's stream) reads it
    assert json.loads(line.removeprefix("data: ")) == chunk


def test_an_unexpected_error_mid_stream_is_an_error_event() -> None:
    async def broken() -> AsyncIterator[dict[str, Any]]:
        yield {"n": 1}
        raise RuntimeError("a bug")

    assert _body(broken(), done_marker=True) == (
        b'data: {"n": 1}\n\n'
        b'error: {"error": {"code": 500, "message": "Internal server error: RuntimeError", "type": "server_error"}}\n\n'
    )
