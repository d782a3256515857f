"""Servers for the client tests: the same flags for lfmserve and, in the slow run, for llama-server.

``target`` is one process per module and server kind: the tiny LFM2-VL model with the tiny vision+audio
projector, embeddings on (mean pooling), an API key, two slots. ``client`` is a sync :class:`Client` or an
:class:`AsyncClient` driven from a background event loop, so every test runs over both.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lfmserve.client import AsyncClient, Client
from tests.conftest import LFMSERVE, LLAMA_SERVER, Running, wait_healthy

API_KEY = "secret-key"
ALIAS = "tiny"


@dataclass
class Target:
    """A server under test: its URL and which program it is (``lfmserve`` or ``llama-server``)."""

    kind: str
    url: str


def launch(kind: str, flags: list[str], started: list[Running]) -> Target:
    program = LFMSERVE if kind == "lfmserve" else str(LLAMA_SERVER)
    if kind == "llama-server" and not LLAMA_SERVER.exists():
        pytest.skip(f"no llama-server at {LLAMA_SERVER} (set LLAMA_SERVER)")
    assert program is not None
    server = Running([program, *flags])
    started.append(server)
    wait_healthy(server.url, server.process)
    return Target(kind, server.url)


@pytest.fixture(scope="module")
def processes() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for server in started:
        server.stop()


@pytest.fixture(scope="module", params=["lfmserve", pytest.param("llama-server", marks=pytest.mark.slow)])
def target(request: pytest.FixtureRequest, processes: list[Running], vl_gguf: Path, mmproj_gguf: Path) -> Target:
    flags = ["-m", str(vl_gguf), "--mmproj", str(mmproj_gguf), "--embeddings", "--pooling", "mean"]
    flags += ["-c", "4096", "-np", "2", "-t", "1", "--jinja", "--alias", ALIAS, "--api-key", API_KEY]
    return launch(str(request.param), flags, processes)


class AsyncDriven:
    """An :class:`AsyncClient` behind sync calls: its coroutines run on one event loop in a thread."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=120)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)
        if name == "stream":
            return lambda *args, **kwargs: self._pulled(method(*args, **kwargs))
        return lambda *args, **kwargs: self.run(method(*args, **kwargs))

    def _pulled(self, events: AsyncGenerator[Any, None]) -> Iterator[Any]:
        """The async stream one event at a time; closing this generator closes the async one."""
        try:
            while True:
                try:
                    yield self.run(events.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self.run(events.aclose())

    def close(self) -> None:
        self.run(self.client.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def make_client(kind: str, url: str, **options: Any) -> Any:
    """A :class:`Client`, or an :class:`AsyncClient` made to look like one (``kind`` ``sync`` / ``async``)."""
    return Client(url, **options) if kind == "sync" else AsyncDriven(AsyncClient(url, **options))


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(kind: str, target: Target) -> Iterator[Any]:
    made = make_client(kind, target.url, api_key=API_KEY, model=ALIAS, timeout=120)
    yield made
    made.close()
