"""Large bodies are parsed and prepared off the event loop: other requests are answered meanwhile."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence

import httpx
import pytest

from lfmserve.api.offload import OFF_LOOP_BYTES, Offload
from lfmserve.chat.serving import Serving
from lfmserve.engine.records import MediaSpan
from lfmserve.llama.mtmd import Media
from tests.conftest import ServerThread


def test_small_work_runs_inline_and_large_work_in_a_worker_thread() -> None:
    async def where(offload: Offload) -> str:
        return await offload(lambda: threading.current_thread().name)

    loop_thread = asyncio.run(where(Offload(large=False)))
    worker_thread = asyncio.run(where(Offload(large=True)))
    assert loop_thread == threading.main_thread().name and worker_thread != loop_thread


def test_health_answers_while_a_huge_prompt_is_tokenized(
    tiny_server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The huge prompt's tokenization is held until /health has answered: were it on the event loop, /health
    could not answer before it ends, and the test would fail on the health request's timeout."""
    body = json.dumps({"messages": [{"role": "user", "content": "word " * 60_000}], "max_tokens": 1}).encode()
    assert len(body) > OFF_LOOP_BYTES
    entered, release = threading.Event(), threading.Event()
    tokenizing_threads: list[threading.Thread] = []
    tokenize = Serving.tokenize_with_media

    def held(
        self: Serving, text: str, media: Sequence[Media], *, chat: bool
    ) -> tuple[Sequence[int], tuple[MediaSpan, ...]]:
        if len(text) > OFF_LOOP_BYTES:  # the huge prompt only
            tokenizing_threads.append(threading.current_thread())
            entered.set()
            assert release.wait(60), "the test never let the tokenization go on"
        return tokenize(self, text, media, chat=chat)

    monkeypatch.setattr(Serving, "tokenize_with_media", held)
    responses: list[httpx.Response] = []

    def big() -> None:
        url, headers = tiny_server.url + "/v1/chat/completions", {"content-type": "application/json"}
        responses.append(httpx.post(url, content=body, headers=headers, timeout=120))

    thread = threading.Thread(target=big)
    thread.start()
    try:
        assert entered.wait(60), "the huge prompt never reached its tokenization"
        health = httpx.get(tiny_server.url + "/health", timeout=10)
        assert health.status_code == 200 and responses == []  # answered while the prompt is still being prepared
    finally:
        release.set()
        thread.join(timeout=120)
    assert len(tokenizing_threads) == 1 and tokenizing_threads[0] is not tiny_server.thread  # not the event loop's
    assert responses[0].json()["error"]["type"] == "exceed_context_size_error"


def test_a_small_prompt_is_tokenized_on_the_event_loop(
    tiny_server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokenizing_threads: list[threading.Thread] = []
    tokenize = Serving.tokenize_with_media

    def spied(
        self: Serving, text: str, media: Sequence[Media], *, chat: bool
    ) -> tuple[Sequence[int], tuple[MediaSpan, ...]]:
        tokenizing_threads.append(threading.current_thread())
        return tokenize(self, text, media, chat=chat)

    monkeypatch.setattr(Serving, "tokenize_with_media", spied)
    body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1, "temperature": 0}
    assert httpx.post(tiny_server.url + "/v1/chat/completions", json=body, timeout=60).status_code == 200
    assert tokenizing_threads == [tiny_server.thread]
