"""The client at start-up: a request sent before the server listens, and while its model loads, waits and then
succeeds; with no retries left it raises ``TransportError`` / ``Unavailable`` instead. lfmserve only (its
model load is held back by the test, so each phase is certain, not timed)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from lfmserve.api.app import create_app
from lfmserve.errors import TransportError, Unavailable
from lfmserve.loading.loader import ModelFiles, load_serving
from lfmserve.settings import Settings
from lfmserve.testing import free_port
from tests.client.conftest import make_client


class Recording(httpx.HTTPTransport):
    """A real transport that notes each attempt's outcome: a status, or ``refused``."""

    def __init__(self) -> None:
        super().__init__()
        self.outcomes: list[int | str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = super().handle_request(request)
        except httpx.ConnectError:
            self.outcomes.append("refused")
            raise
        self.outcomes.append(response.status_code)
        return response


class RecordingAsync(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.outcomes: list[int | str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await super().handle_async_request(request)
        except httpx.ConnectError:
            self.outcomes.append("refused")
            raise
        self.outcomes.append(response.status_code)
        return response


@pytest.fixture
def held_server(tiny_gguf: Path) -> Iterator[tuple[str, threading.Event, Any]]:
    """A server on a known port, not started yet: ``start()`` listens; its model loads once the event is set."""
    port = free_port()
    settings = Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1)
    release = threading.Event()

    def load() -> Any:
        release.wait(60)
        return load_serving(settings, ModelFiles(str(tiny_gguf)))

    server = uvicorn.Server(
        uvicorn.Config(create_app(settings, load), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)

    def start() -> None:
        thread.start()
        while not server.started:
            time.sleep(0.01)

    yield f"http://127.0.0.1:{port}", release, start
    release.set()
    server.should_exit = True
    if thread.is_alive():
        thread.join(30)


def test_a_request_waits_through_refused_connections_and_loading(kind: str, held_server: Any) -> None:
    url, release, start = held_server
    transport = Recording() if kind == "sync" else RecordingAsync()
    patient = make_client(kind, url, retries=40, timeout=60, transport=transport)
    impatient = make_client(kind, url, retries=0)
    answers: list[Any] = []
    waiting = threading.Thread(target=lambda: answers.append(patient.chat("hi", max_tokens=2, temperature=0)))
    try:
        with pytest.raises(TransportError, match="cannot connect"):
            impatient.chat("hi")
        waiting.start()
        while "refused" not in transport.outcomes:
            time.sleep(0.01)
        start()
        while 503 not in transport.outcomes:
            time.sleep(0.01)
        with pytest.raises(Unavailable, match="^Loading model$"):
            impatient.chat("hi")
        release.set()
        waiting.join(60)
        assert answers and answers[0].usage.completion_tokens == 2
        first_503 = transport.outcomes.index(503)
        assert set(transport.outcomes[:first_503]) == {"refused"}
        assert set(transport.outcomes[first_503:-1]) == {503} and transport.outcomes[-1] == 200
    finally:
        patient.close()
        impatient.close()


def test_wait_until_ready_gives_up_with_unavailable(kind: str, held_server: Any) -> None:
    url, _, start = held_server
    start()
    client = make_client(kind, url)
    try:
        assert client.health() is False
        # The model is held until the test ends: only the 0.6 s deadline ends the wait, and the error names it.
        with pytest.raises(Unavailable, match=r"was not ready after 0.6 s"):
            client.wait_until_ready(timeout=0.6)
    finally:
        client.close()
