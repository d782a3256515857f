"""The router's connection to a child (lfmserve/router/upstream.py), against a scripted child on loopback: the exact
request it writes, the answer's pieces as they arrive, and every way the answer can end."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest

from lfmserve.router import upstream
from lfmserve.router.proxy import _for_client
from lfmserve.router.upstream import Upstream, UpstreamError, send

T = TypeVar("T")
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Seen: 1\r\nTransfer-Encoding: chunked\r\n\r\n"

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
#: Runs a test's scenario to its end on one event loop and gives its result.
Run = Callable[[Coroutine[Any, Any, T]], T]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run[Any]:
    """asyncio's own loop, and uvloop's, which the router runs on (its transports are not asyncio's classes)."""
    factory = None
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        factory = uvloop.new_event_loop

    def run_on_loop(scenario: Coroutine[Any, Any, T]) -> T:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(scenario)

    return run_on_loop


async def _child(script: Script) -> tuple[asyncio.Server, int]:
    """A child on loopback that answers each connection with ``script``, then closes it."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await script(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@contextlib.asynccontextmanager
async def _asked(
    script: Script, method: str = "POST", target: str = "/completion", body: bytes = b"{}"
) -> AsyncIterator[Upstream]:
    """The answer to one request of a child that runs ``script``."""
    server, port = await _child(script)
    async with server:
        yield await send("127.0.0.1", port, method, target, [], body)


async def _request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.startswith(b"content-length"))
    return head + await reader.readexactly(length)


async def _pieces(answer: Upstream) -> list[bytes]:
    return [piece async for piece in answer.body()]


def test_the_request_is_written_whole_with_its_length_and_a_close(run: Run[Any]) -> None:
    seen: list[bytes] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await _request(reader))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    async def scenario() -> tuple[int, int, list[tuple[str, str]], list[bytes]]:
        server, port = await _child(script)
        async with server:
            headers = [("authorization", "Bearer k"), ("content-type", "application/json")]
            answer = await send("127.0.0.1", port, "POST", "/v1/chat/completions?x=%3F", headers, b'{"a":1}')
            return port, answer.status_code, answer.headers, await _pieces(answer)

    port, *answer = run(scenario())
    assert answer == [200, [("content-length", "2")], [b"ok"]]
    assert seen == [
        b"POST /v1/chat/completions?x=%3F HTTP/1.1\r\n"
        + f"host: 127.0.0.1:{port}\r\n".encode()
        + b"authorization: Bearer k\r\ncontent-type: application/json\r\n"
        + b"content-length: 7\r\nconnection: close\r\n\r\n"
        + b'{"a":1}'
    ]


def test_chunks_that_arrive_together_are_one_piece_without_their_framing(run: Run[Any]) -> None:
    first_read = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(CHUNKED_HEAD + b"6\r\ndata: \r\n")
        await writer.drain()
        await first_read.wait()  # what follows arrives in one write
        writer.write(b"3\r\na\n\n\r\n3\r\nb\n\n\r\n0\r\n\r\n")
        await writer.drain()

    async def scenario() -> tuple[list[tuple[str, str]], list[bytes]]:
        async with _asked(script, "GET", "/v1/stream", b"") as answer:
            pieces = answer.body()
            first = await anext(pieces)
            first_read.set()
            return answer.headers, [first, *[piece async for piece in pieces]]

    headers, pieces = run(scenario())
    assert headers == [("content-type", "text/event-stream"), ("x-seen", "1"), ("transfer-encoding", "chunked")]
    assert pieces == [b"data: ", b"a\n\nb\n\n"]


def test_a_piece_sooner_than_the_gap_waits_it_out_with_the_child_unread(
    run: Run[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gap is held open by the test (asyncio.sleep of the gap's length waits for ``gap_over``): what the child
    writes while it is open stays unread, then comes in one piece."""
    gap_s = 3600.0
    first_read, unread, gap_over, third_read = (asyncio.Event() for _ in range(4))
    waits: list[float] = []
    sleep = asyncio.sleep

    async def held_gap(seconds: float) -> None:
        if seconds < gap_s / 2:
            await sleep(seconds)
            return
        waits.append(seconds)
        await gap_over.wait()
        gap_over.clear()

    monkeypatch.setattr(asyncio, "sleep", held_gap)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(CHUNKED_HEAD + b"1\r\na\r\n")
        await first_read.wait()
        writer.write(b"1\r\nb\r\n")  # read at once, then held until the gap is over
        await unread.wait()
        writer.write(b"1\r\nc\r\n")
        writer.write(b"1\r\nd\r\n")
        gap_over.set()
        await third_read.wait()
        writer.write(b"1\r\ne\r\n0\r\n\r\n")  # the end: it leaves without a gap

    async def scenario() -> list[bytes]:
        async with _asked(script) as answer:
            transport = answer._transport
            assert transport is not None

            async def hold_the_gaps_open() -> None:
                await _until(lambda: not transport.is_reading())  # "b" came within the gap
                unread.set()  # the script writes "c" and "d", then ends this gap
                await _until(lambda: len(waits) == 2)  # "cd" came within the next one
                gap_over.set()

            watch = asyncio.create_task(hold_the_gaps_open())
            pieces = []
            async for piece in answer.body(gap_s):
                pieces.append(piece)
                first_read.set()
                if len(pieces) == 3:
                    third_read.set()
            await watch
            return pieces

    assert run(scenario()) == [b"a", b"b", b"cd", b"e"]
    # At most the gap, but for the rounding of ``last + gap_s - now`` (uvloop's clock can read the same twice).
    assert len(waits) == 2 and all(gap_s - 1 < wait <= gap_s + 1e-6 for wait in waits)


def test_an_answer_cut_short_gives_what_arrived_then_fails(run: Run[Any]) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(CHUNKED_HEAD + b"4\r\nhalf\r\n")
        await writer.drain()

    async def scenario() -> list[bytes]:
        async with _asked(script) as answer:
            pieces: list[bytes] = []
            with pytest.raises(UpstreamError, match="the child closed the connection"):
                async for piece in answer.body():
                    pieces.append(piece)
            return pieces

    assert run(scenario()) == [b"half"]


def test_a_child_that_closes_before_answering_or_cannot_be_reached_is_an_upstream_error(run: Run[Any]) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)

    async def scenario() -> None:
        server, port = await _child(script)
        async with server:
            with pytest.raises(UpstreamError, match="^the child closed the connection$"):
                await send("127.0.0.1", port, "POST", "/completion", [], b"{}")
        with pytest.raises(UpstreamError, match="^the child could not be reached: "):
            await send("127.0.0.1", port, "POST", "/completion", [], b"{}")

    run(scenario())


def test_a_head_answer_ends_at_its_headers_whatever_its_length_says(run: Run[Any]) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n")
        await writer.drain()
        await reader.read()  # held open: only the router's close ends it

    async def scenario() -> tuple[int, list[bytes]]:
        async with _asked(script, "HEAD", "/health", b"") as answer:
            return answer.status_code, await _pieces(answer)

    assert run(scenario()) == (200, [])


def test_a_slow_reader_pauses_the_child_until_it_takes_what_is_held(
    run: Run[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upstream, "_HELD_BYTES", 4)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(CHUNKED_HEAD + b"5\r\nfirst\r\n")
        await writer.drain()
        await reader.read()

    async def scenario() -> tuple[bytes, bool]:
        async with _asked(script) as answer:
            transport = answer._transport
            assert transport is not None
            pieces = answer.body()
            await _until(lambda: not transport.is_reading())  # 5 bytes held, over the limit: the child is not read
            first = await anext(pieces)
            reading = transport.is_reading()
            answer.close()
            return first, reading

    assert run(scenario()) == (b"first", True)


def test_an_answer_closed_under_its_reader_fails_it(run: Run[Any]) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(CHUNKED_HEAD + b"5\r\nfirst\r\n")
        await writer.drain()
        await reader.read()

    async def scenario() -> bytes:
        async with _asked(script) as answer:
            pieces = answer.body()
            first = await anext(pieces)
            answer.close()
            with pytest.raises(UpstreamError, match="^the child closed the connection$"):
                await anext(pieces)
            return first

    assert run(scenario()) == b"first"


def test_an_interim_answer_and_a_bodys_trailers_are_not_the_answers_head(run: Run[Any]) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n" + CHUNKED_HEAD)
        writer.write(b"2\r\nok\r\n0\r\nX-Trailer: 1\r\n\r\n")
        await writer.drain()

    async def scenario() -> tuple[int, list[tuple[str, str]], list[bytes]]:
        async with _asked(script) as answer:
            return answer.status_code, answer.headers, await _pieces(answer)

    status, headers, pieces = run(scenario())
    assert (status, pieces) == (200, [b"ok"])
    assert headers == [("content-type", "text/event-stream"), ("x-seen", "1"), ("transfer-encoding", "chunked")]


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.001)


def test_the_client_gets_a_repeated_header_as_one_field_and_no_hop_by_hop_header() -> None:
    headers = [("x-tag", "a"), ("connection", "close"), ("x-tag", "b"), ("transfer-encoding", "chunked")]
    assert _for_client([*headers, ("content-type", "text/event-stream")]) == {
        "x-tag": "a, b",
        "content-type": "text/event-stream",
    }
