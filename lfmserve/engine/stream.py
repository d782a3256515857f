"""Per-request output channels from the engine thread to a consumer.

The engine thread calls ``put`` and never waits. :class:`AsyncStream` hands each item to an
asyncio loop with one ``call_soon_threadsafe`` (a deque and a future, lighter than an
``asyncio.Queue``: this runs once per generated token); :class:`SyncStream` hands it to a blocking
iterator (the in-process API), and :class:`SyncResult` one result (an embedding request's) to a blocking
caller. Errors travel through the same channel and are raised by the consumer.
"""

from __future__ import annotations

import asyncio
import collections
import queue
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Generic, Protocol, TypeVar

from .records import EngineOutput, TokenLogprob

T = TypeVar("T")


class OutputSink(Protocol):
    def put(self, item: EngineOutput | BaseException) -> None: ...


class AsyncStream:
    """Consumed with ``async for``; ends after the finished output, raises a delivered error."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._items: collections.deque[EngineOutput | BaseException] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: EngineOutput | BaseException) -> None:
        self._items.append(item)  # deque.append is atomic; the wake-up runs on the loop
        _wake_up(self._loop, self._wake)

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def __aiter__(self) -> AsyncIterator[EngineOutput]:
        items = self._items
        while True:
            while not items:
                self._waiter = self._loop.create_future()
                await self._waiter
            item = items.popleft()
            if isinstance(item, BaseException):
                raise item
            yield item
            if item.finished:
                return


class CollectingStream:
    """For a non-streaming answer: gathers text and tokens on the engine thread and wakes the
    consumer once, at the end, instead of once per token."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._last: ResultFuture[EngineOutput] = ResultFuture(loop)
        self.texts: list[str] = []
        self.tokens: list[int] = []
        self.logprobs: list[TokenLogprob] = []

    def put(self, item: EngineOutput | BaseException) -> None:
        if isinstance(item, BaseException):
            self._last.put(item)
            return
        self.texts.append(item.text)
        self.tokens.extend(item.token_ids)
        self.logprobs.extend(item.logprobs)
        if item.finished:
            self._last.put(item)

    async def last(self) -> EngineOutput:
        """The finished output, once generation has ended (raises a delivered error)."""
        return await self._last.result()

    def discard(self) -> None:
        """Nobody will await :meth:`last` any more (on the consumer's loop): what still comes is dropped."""
        self._last.discard()


class ResultFuture(Generic[T]):
    """One result (or error) put by the engine thread, awaited on an asyncio loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._done: asyncio.Future[T] = self._loop.create_future()

    def put(self, item: T | BaseException) -> None:
        _wake_up(self._loop, self._resolve, item)

    def _resolve(self, item: T | BaseException) -> None:
        if self._done.done():
            return
        if isinstance(item, BaseException):
            self._done.set_exception(item)
        else:
            self._done.set_result(item)

    async def result(self) -> T:
        return await self._done

    def discard(self) -> None:
        """Nobody will await :meth:`result` any more (on the loop): an error delivered later, a cancelled request's
        own, is dropped, and one already here is marked read, instead of "Future exception was never retrieved"."""
        if not self._done.done():
            self._done.cancel()
        elif not self._done.cancelled():
            self._done.exception()


def _wake_up(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: object) -> None:
    """Run ``callback`` on ``loop``; a loop that has closed has nobody listening, and the engine goes on."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # "Event loop is closed": the consumer's asyncio.run() ended
        pass


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


class SyncResult(Generic[T]):
    """One result (or error) put by the engine thread, waited for by a plain call from any other thread."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[T | BaseException] = queue.SimpleQueue()

    def put(self, item: T | BaseException) -> None:
        self._queue.put(item)

    def result(self) -> T:
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        return item
