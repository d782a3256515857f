"""Faults in a router's machinery, over real processes: its fork server killed while a model loads, a model
unloaded while it loads, a load asked of a full router. A model "loads" here as long as the test wants: it comes
from a hub (on loopback) that holds every request until the test lets it answer."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from lfmserve.testing.hub import fake_hub
from tests.conftest import Running, ServerThread
from tests.router.conftest import chat, child_pid, descendants, entries, start_router, wait_status

REPO = "LiquidAI/Slow-Tiny-GGUF"


class HeldHub:
    """A fake hub that holds each request until ``gate`` opens, counting the requests it holds."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.gate = threading.Event()
        self.held = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.held += 1
            await asyncio.to_thread(self.gate.wait)
        await self.app(scope, receive, send)

    def wait_held(self) -> None:
        deadline = time.monotonic() + 120
        while self.held == 0:
            assert time.monotonic() < deadline, "the child never asked the hub for its model"
            time.sleep(0.02)


@pytest.fixture
def held_hub(router_models: Path) -> Iterator[tuple[HeldHub, str]]:
    weights = (router_models / "models" / "text.gguf").read_bytes()
    hub = HeldHub(fake_hub(REPO, {"Slow-Tiny-Q4_K_M.gguf": weights}))
    thread = ServerThread(hub).start()
    try:
        yield hub, thread.url
    finally:
        hub.gate.set()
        thread.stop()


def _slow_router(running: list[Running], router_models: Path, tmp_path: Path, hub_url: str, *flags: str) -> Running:
    """A router with the usual models and ``slow``, a model its child downloads from the held hub."""
    preset = tmp_path / "preset.ini"
    preset.write_text(f"[slow]\nhf-repo = {REPO}\nno-mmproj = true\n")
    env = {
        "HF_ENDPOINT": hub_url,
        "HF_HUB_CACHE": str(tmp_path / "hf"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_ETAG_TIMEOUT": "600",  # the hub answers when the test says so, however long that takes
        "HF_HUB_DOWNLOAD_TIMEOUT": "600",
    }
    return start_router(running, router_models, *flags, preset=preset, env=env)


def _fork_server(router: Running) -> int:
    """The router's fork server (its children share its command line, so it is the one the router started)."""
    found = [
        pid
        for pid in descendants(router.process.pid)
        if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
        and int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == router.process.pid
    ]
    assert len(found) == 1, found
    return found[0]


def _status(router: Running, model: str) -> dict[str, Any]:
    status: dict[str, Any] = entries(router)[model]["status"]
    return status


def test_the_fork_server_killed_while_a_model_loads_fails_its_models_and_the_next_request_loads_again(
    running: list[Running], router_models: Path, tmp_path: Path, held_hub: tuple[HeldHub, str]
) -> None:
    hub, hub_url = held_hub
    router = _slow_router(running, router_models, tmp_path, hub_url)
    assert chat(router, "text").status_code == 200
    with ThreadPoolExecutor(1) as waiter:
        waiting = waiter.submit(chat, router, "slow")
        hub.wait_held()  # the child is loading: it waits for the hub
        assert _status(router, "slow")["value"] == "loading"
        os.kill(_fork_server(router), signal.SIGKILL)
        answer = waiting.result(timeout=120)
    assert (answer.status_code, answer.json()["error"]["message"]) == (
        500,
        "model name=slow failed to load: its fork server stopped",
    )
    for model in ("slow", "text"):  # each model the fork server had started
        status = wait_status(router, model, "unloaded")["status"]
        assert (status["failed"], status["exit_code"], status["error"]) == (True, -9, "its fork server stopped")
    hub.gate.set()
    assert chat(router, "slow").status_code == 200  # a new fork server starts the next children
    assert chat(router, "text").status_code == 200
    assert _status(router, "text")["value"] == "loaded"
    assert "failed" not in _status(router, "text")


def test_an_unload_during_a_load_stops_the_child_and_fails_its_waiting_request(
    running: list[Running], router_models: Path, tmp_path: Path, held_hub: tuple[HeldHub, str]
) -> None:
    hub, hub_url = held_hub
    router = _slow_router(running, router_models, tmp_path, hub_url)
    with ThreadPoolExecutor(1) as waiter:
        waiting = waiter.submit(chat, router, "slow")
        hub.wait_held()
        child = child_pid(router, "slow")
        assert child is not None
        unloaded = httpx.post(router.url + "/models/unload", json={"model": "slow"}, timeout=30)
        assert (unloaded.status_code, unloaded.json()) == (200, {"success": True})
        answer = waiting.result(timeout=120)
    assert (answer.status_code, answer.json()["error"]["message"]) == (
        503,
        "model 'slow' was unloaded while it was loading",
    )
    status = wait_status(router, "slow", "unloaded")["status"]
    assert "failed" not in status  # a stop asked for is no failure
    assert child not in descendants(router.process.pid)

    # Ollama's empty request with keep_alive 0 on a loading model: answered once the model is gone.
    with ThreadPoolExecutor(1) as waiter:
        waiting = waiter.submit(chat, router, "slow")
        wait_status(router, "slow", "loading")
        emptied = httpx.post(router.url + "/api/generate", json={"model": "slow", "keep_alive": 0}, timeout=120)
        assert (emptied.status_code, emptied.json()["done_reason"]) == (200, "unload")
        assert waiting.result(timeout=120).status_code == 503
    assert _status(router, "slow")["value"] == "unloaded"


def test_a_load_asked_of_a_full_router_is_a_503(
    running: list[Running], router_models: Path, tmp_path: Path, held_hub: tuple[HeldHub, str]
) -> None:
    hub, hub_url = held_hub
    router = _slow_router(running, router_models, tmp_path, hub_url, "--models-max", "1")
    loading = httpx.post(router.url + "/models/load", json={"model": "slow"}, timeout=30)
    assert (loading.status_code, loading.json()) == (200, {"success": True})
    hub.wait_held()  # its one place is taken by a model that is busy loading
    full = httpx.post(router.url + "/models/load", json={"model": "text"}, timeout=30)
    assert full.status_code == 503
    assert full.json()["error"] == {
        "code": 503,
        "message": "model limit reached, try again later",
        "type": "unavailable_error",
    }
    hub.gate.set()
    wait_status(router, "slow", "loaded")
    assert httpx.post(router.url + "/models/load", json={"model": "text"}, timeout=30).status_code == 200
    wait_status(router, "text", "loaded")
    assert _status(router, "slow")["value"] == "unloaded"  # the idle one made room
