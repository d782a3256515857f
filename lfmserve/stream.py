"""Per-request output channels from the engine thread to a consumer.

The engine thread calls ``put`` and never waits. :class:`AsyncStream` hands each item to an
asyncio loop with ``call_soon_threadsafe``; :class:`SyncStream` hands it to a blocking iterator
(the in-process API). Errors travel through the same channel and are raised by the consumer.
"""

from __future__ import annotations

import asyncio
import queue
from typing import AsyncIterator, Iterator, Protocol

from .records import EngineOutput


class OutputSink(Protocol):
    def put(self, item: EngineOutput | BaseException) -> None: ...


class AsyncStream:
    """Consumed with ``async for``; ends after the finished output, raises a delivered error."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._queue: asyncio.Queue[EngineOutput | BaseException] = asyncio.Queue()

    def put(self, item: EngineOutput | BaseException) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    async def __aiter__(self) -> AsyncIterator[EngineOutput]:
        while True:
            item = await self._queue.get()
            if isinstance(item, BaseException):
                raise item
            yield item
            if item.finished:
                return


class SyncStream:
    """Consumed with a plain ``for`` loop from any thread but the engine's."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[EngineOutput | BaseException] = queue.SimpleQueue()

    def put(self, item: EngineOutput | BaseException) -> None:
        self._queue.put(item)

    def __iter__(self) -> Iterator[EngineOutput]:
        while True:
            item = self._queue.get()
            if isinstance(item, BaseException):
                raise item
            yield item
            if item.finished:
                return
