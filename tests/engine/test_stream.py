"""Output channels from the engine thread: asyncio streams (per token or collected) and a blocking iterator."""

from __future__ import annotations

import asyncio
import gc
import threading

import pytest

from lfmserve.engine.records import EngineOutput, Timings, TokenLogprob
from lfmserve.engine.stream import AsyncStream, CollectingStream, SyncStream
from lfmserve.errors import EngineError


def _out(text: str, token: int, *, finished: bool = False) -> EngineOutput:
    return EngineOutput(
        text=text,
        token_ids=(token,),
        id_slot=0,
        n_prompt_tokens=3,
        n_cached_tokens=0,
        n_decoded=token,
        timings=Timings(),
        finish_reason="stop" if finished else None,
        logprobs=(TokenLogprob(token, -0.5, ()),),
    )


def _from_a_thread(put: object, items: list[EngineOutput | BaseException]) -> threading.Thread:
    thread = threading.Thread(target=lambda: [put(item) for item in items])  # type: ignore[operator]
    thread.start()
    return thread


def test_async_stream_yields_each_output_until_the_finished_one() -> None:
    async def main() -> list[str]:
        stream = AsyncStream()
        _from_a_thread(stream.put, [_out("a", 1), _out("b", 2), _out("c", 3, finished=True)]).join()
        return [out.text async for out in stream]

    assert asyncio.run(main()) == ["a", "b", "c"]


def test_async_stream_raises_a_delivered_error() -> None:
    async def main() -> list[str]:
        stream = AsyncStream()
        _from_a_thread(stream.put, [_out("a", 1), EngineError("decode failed")]).join()
        return [out.text async for out in stream]

    with pytest.raises(EngineError, match="decode failed"):
        asyncio.run(main())


def test_collecting_stream_gathers_everything_and_wakes_once() -> None:
    async def main() -> tuple[EngineOutput, list[str], list[int], int]:
        stream = CollectingStream()
        _from_a_thread(stream.put, [_out("a", 1), _out("b", 2, finished=True)]).join()
        last = await stream.last()
        return last, stream.texts, stream.tokens, len(stream.logprobs)

    last, texts, tokens, n_logprobs = asyncio.run(main())
    assert (last.text, texts, tokens, n_logprobs) == ("b", ["a", "b"], [1, 2], 2)


def test_collecting_stream_raises_a_delivered_error() -> None:
    async def main() -> EngineOutput:
        stream = CollectingStream()
        _from_a_thread(stream.put, [_out("a", 1), EngineError("boom")]).join()
        return await stream.last()

    with pytest.raises(EngineError, match="boom"):
        asyncio.run(main())


def test_a_discarded_collecting_stream_drops_its_error_unread() -> None:
    """A request given up on (``Serving.run_all``: another one failed) is cancelled and its stream discarded: the
    cancel's error, whether it arrives later or is already there, is not "Future exception was never retrieved"."""
    reported: list[str] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, context: reported.append(context["message"]))
        later, already = CollectingStream(), CollectingStream()
        _from_a_thread(already.put, [EngineError("cancelled")]).join()
        await asyncio.sleep(0)  # its wake-up, queued before this task's, has run
        for stream in (later, already):
            stream.discard()
        _from_a_thread(later.put, [EngineError("cancelled")]).join()
        await asyncio.sleep(0)

    asyncio.run(main())
    gc.collect()  # a future whose error was never read reports it as it is collected
    assert reported == []


def test_sync_stream_is_a_blocking_iterator() -> None:
    stream = SyncStream()
    _from_a_thread(stream.put, [_out("x", 1), _out("y", 2, finished=True), _out("never", 3)])
    assert [out.text for out in stream] == ["x", "y"]


def test_outputs_for_a_closed_loop_are_dropped_without_an_error() -> None:
    """The consumer's asyncio.run() has ended: the engine thread must not fail on its next output."""
    loop = asyncio.new_event_loop()
    streams = [AsyncStream(loop), CollectingStream(loop)]
    loop.close()
    for stream in streams:
        stream.put(_out("late", 1, finished=True))
        stream.put(EngineError("late"))
