"""The pool's transitions, driven in-process over real children: a stop asked for while a child is being started,
an idle expiry racing a request (with a clock the test moves), a listener of ``/models/sse`` that stops
reading, and a client that leaves before its answer's first chunk; over a fake child, the exit watch of a killed
child cancelled at shutdown."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.cli import serve_child
from lfmserve.errors import Unavailable
from lfmserve.router.catalog import build_catalog
from lfmserve.router.child import Child
from lfmserve.router.events import Events
from lfmserve.router.instance import LOADED, UNLOADED
from lfmserve.router.lifecycle import Lifecycle
from lfmserve.router.pool import Pool
from lfmserve.router.proxy import _Relayed
from lfmserve.router.registry import Registry
from lfmserve.router.serve import PRELOAD
from lfmserve.router.spawn import ChildStart, Spawner
from lfmserve.settings import Settings
from tests.router.conftest import CHILD_FLAGS
from tests.router.fake_children import Clock, FakeSpawner, describe, spec, until


class GatedSpawner(Spawner):
    """The router's spawner, holding each start until the test opens ``gate``; keeps the processes it started."""

    def __init__(self) -> None:
        super().__init__(serve_child, PRELOAD, None)
        self.asked = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.processes: list[BaseProcess] = []

    def start(self, start: ChildStart) -> BaseProcess:
        self.asked.set()
        self.gate.wait()
        process = super().start(start)
        self.processes.append(process)
        return process


async def _describe(child: Child) -> dict[str, Any]:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {child.api_key}"}) as client:
        entry: dict[str, Any] = (await client.get(child.url + "/v1/models", timeout=30)).json()["data"][0]
        return entry


def _pool(router_models: Path, spawner: Spawner, clock: Clock, *flags: str) -> Pool:
    settings = Settings.from_argv(["--models-dir", str(router_models / "models"), *CHILD_FLAGS, *flags], environ={})
    catalog = {name: spec for name, spec in build_catalog(settings).items() if name == "text"}
    return Pool(catalog, settings.router, spawner, Events(), _describe, clock)


async def _answers(child: Child) -> int:
    """The status of a chat sent straight to the child."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {child.api_key}"}) as client:
        return (await client.post(child.url + "/v1/chat/completions", json=body, timeout=60)).status_code


@pytest.fixture
def isolated_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))


@pytest.mark.usefixtures("isolated_cache")
def test_an_unload_while_the_child_is_being_started_stops_it_once_it_exists(router_models: Path) -> None:
    spawner = GatedSpawner()
    spawner.gate.clear()

    async def scenario() -> None:
        pool = _pool(router_models, spawner, Clock())
        pool.start()
        text = pool.registry.get("text")
        waiting = asyncio.create_task(pool.acquire(text, autoload=True, touch=True))
        await asyncio.to_thread(spawner.asked.wait)  # the scheduler is starting the child now
        await pool.unload("text")  # answered at once, as llama-server does
        assert (text.status, text.stopping, text.child) == ("loading", True, None)
        spawner.gate.set()
        with pytest.raises(Unavailable) as refused:
            await waiting
        assert refused.value.message == "model 'text' was unloaded while it was loading"
        assert (text.status, text.child, text.failed, text.error) == (UNLOADED, None, False, None)
        assert [process.exitcode for process in spawner.processes] == [-9]  # killed while it loaded
        child = await pool.acquire(text, autoload=True, touch=True)  # the next request loads it again
        assert await _answers(child) == 200
        pool.release(text)
        await pool.close()

    asyncio.run(scenario())


@pytest.mark.usefixtures("isolated_cache")
def test_an_expiry_and_a_request_in_the_same_moment_never_share_a_stopping_child(router_models: Path) -> None:
    spawner, clock = GatedSpawner(), Clock()

    async def scenario() -> None:
        pool = _pool(router_models, spawner, clock, "--models-ttl", "10")
        pool.start()
        text = pool.registry.get("text")
        first = await pool.acquire(text, autoload=True, touch=True)
        pool.release(text)

        # A request taken first: the model is busy, the expiry passes it by, then it counts from the request's end.
        clock.now += 11
        taken = await pool.acquire(text, autoload=True, touch=True)
        pool.expire_idle()
        assert (taken, text.status, text.stopping) == (first, LOADED, False)
        assert await _answers(taken) == 200
        pool.release(text)
        pool.expire_idle()
        assert text.stopping is False

        # The expiry first: the request that comes in the same step waits for a new child.
        clock.now += 11
        pool.expire_idle()
        second = await pool.acquire(text, autoload=True, touch=True)
        assert second is not first and first.exited.result() == 0
        assert await _answers(second) == 200
        pool.release(text)
        await pool.close()

    asyncio.run(scenario())
    assert len(spawner.processes) == 2


def test_a_listener_that_stops_reading_is_ended_not_kept() -> None:
    async def scenario() -> list[str]:
        events = Events()
        slow = events.listen()
        first = asyncio.ensure_future(anext(slow))
        await asyncio.sleep(0)  # the listener starts: it waits for its first event
        events.publish("text", "status_change", {"status": "loading"})
        seen = [(await first)["data"]["status"]]
        for number in range(1025):  # one more than a listener may fall behind by
            events.publish("text", "status_change", {"status": str(number)})
        seen += [event["data"]["status"] async for event in slow]
        events.publish("text", "status_change", {"status": "after"})
        return seen

    assert asyncio.run(scenario()) == ["loading"]


def test_an_answer_whose_client_left_before_its_first_chunk_still_releases_its_model() -> None:
    started, ended = [], []

    async def chunks() -> AsyncIterator[bytes]:
        started.append(True)
        yield b"data: never read\n\n"

    async def end() -> None:
        ended.append(True)

    async def scenario() -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            await asyncio.Event().wait()  # the client is gone: nothing is ever written

        scope = {"type": "http", "asgi": {"spec_version": "2.3"}, "method": "POST", "path": "/v1/chat/completions"}
        await _Relayed(chunks(), end, 200, {"content-type": "text/event-stream"})(scope, receive, send)

    asyncio.run(scenario())
    assert (started, ended) == ([], [True])


def test_a_killed_childs_exit_watch_cancelled_at_shutdown_raises_nothing_and_keeps_the_child() -> None:
    spawner = FakeSpawner()
    unhandled: list[dict[str, Any]] = []

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: unhandled.append(context))
        registry = Registry({"text": spec("text")})
        lifecycle = Lifecycle(registry, spawner, Events(), describe, Clock())
        text = registry.get("text")
        await lifecycle.launch(text)
        process = spawner.processes[0]
        process.tell_ready()
        await until(lambda: text.status == LOADED and text.info is not None)
        child = text.child
        lifecycle.fail(text, "the router lost track of it")  # killed; its exit is watched
        await lifecycle.close()  # the follower, waiting for the exit, is cancelled and the exit future with it
        assert child is not None and child.exited.cancelled() and process.killed
        assert (text.child, text.status) == (child, LOADED)  # no exit code made up: the model keeps its child
        process.end()
        await until(lambda: child._finishing is not None and child._finishing.done())
        assert child._finishing is not None
        child._finishing.result()  # the exit, seen after the cancellation, raises nothing either

    asyncio.run(scenario())
    spawner.close()
    assert unhandled == []
