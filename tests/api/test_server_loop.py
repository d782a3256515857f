"""The server's main loop (lfmserve/api/server.py): uvicorn's tick once a second instead of ten times, and an exit
asked from any thread seen at once."""

from __future__ import annotations

import asyncio
import threading

import pytest
from starlette.applications import Starlette

from lfmserve.api import server as server_module
from lfmserve.api.server import Server
from lfmserve.settings import Settings


async def _drain(_: float) -> None:
    return None


def test_the_loop_refreshes_the_date_at_each_tick_and_an_exit_asked_from_a_thread_ends_it_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(server_module, "_TICK_S", 3600.0)  # only the exit can end a wait: none times out here
    server = Server(Starlette(), Settings.from_argv([], environ={}).server, _drain)
    ticks: list[int] = []
    first_tick = threading.Event()

    async def on_tick(counter: int) -> bool:
        ticks.append(counter)
        asked = server.should_exit
        first_tick.set()  # after the read: the exit is asked while the loop waits
        return asked

    monkeypatch.setattr(server, "on_tick", on_tick)

    async def scenario() -> None:
        running = asyncio.create_task(server.main_loop())
        asker = threading.Thread(target=lambda: (first_tick.wait(), setattr(server, "should_exit", True)))
        asker.start()
        await asyncio.wait_for(running, 60)
        asker.join()

    asyncio.run(scenario())
    assert ticks == [0, 10]  # uvicorn refreshes its Date header when the count is a multiple of 10
