"""``--kv-unified``: the slots share the whole context instead of ``-c / -np`` each, as llama-server's; a decode that
finds no room fails every generation in it with llama-server's "Context size has been exceeded"."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from lfmserve.settings import Settings
from tests.conftest import ServerThread


@pytest.fixture(scope="module")
def shared(server_factory: Callable[..., ServerThread], tiny_llama_gguf: Path) -> ServerThread:
    settings = Settings.of(model=str(tiny_llama_gguf), ctx_size=256, parallel=4, threads=1, kv_unified=True)
    return server_factory(settings)


def complete(server: ServerThread, n_predict: int) -> httpx.Response:
    body = {"prompt": "A", "n_predict": n_predict, "ignore_eos": True, "temperature": 0}
    return httpx.post(server.url + "/completion", json=body, timeout=60)


def test_one_slot_may_fill_the_whole_context(shared: ServerThread) -> None:
    assert httpx.get(shared.url + "/props").json()["default_generation_settings"]["n_ctx"] == 256
    answer = complete(shared, 200).json()  # far past 256 / 4 = 64
    assert (answer["tokens_predicted"], answer["truncated"], answer["stop_type"]) == (200, False, "limit")


def test_slots_that_outgrow_the_shared_context_fail_together(shared: ServerThread) -> None:
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: complete(shared, 130), range(4)))  # any two side by side: 264 > 256 cells
    message = "Context size has been exceeded: no room in the KV cache (llama_decode code 1)"
    failed = [a for a in answers if a.status_code == 500]
    assert {a.json()["error"]["message"] for a in failed} == {message}
    assert all(a.json()["tokens_predicted"] == 130 for a in answers if a.status_code == 200)  # never cut short
    assert len(failed) >= 2  # those that ran side by side failed in the same decode
    assert complete(shared, 20).json()["tokens_predicted"] == 20  # the failed slots' cells were given back
