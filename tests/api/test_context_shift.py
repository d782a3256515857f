"""``/completion`` at the end of a slot's context, with and without ``--context-shift`` (llama-server's
test_ctx_shift.py on the tiny attention-only model: a 256-token slot)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.settings import Settings
from tests.conftest import ServerThread


def _server(start: Callable[..., ServerThread], model: Path, *, context_shift: bool) -> ServerThread:
    return start(Settings.of(model=str(model), ctx_size=512, parallel=2, threads=2, context_shift=context_shift))


@pytest.fixture(scope="module")
def plain(server_factory: Callable[..., ServerThread], tiny_llama_gguf: Path) -> ServerThread:
    return _server(server_factory, tiny_llama_gguf, context_shift=False)


@pytest.fixture(scope="module")
def shifting(server_factory: Callable[..., ServerThread], tiny_llama_gguf: Path) -> ServerThread:
    return _server(server_factory, tiny_llama_gguf, context_shift=True)


def _complete(server: ServerThread, n_prompt: int, n_predict: int) -> dict[str, Any]:
    body = {"prompt": list(range(100, 100 + n_prompt)), "n_predict": n_predict, "ignore_eos": True, "temperature": 0}
    response = httpx.post(server.url + "/completion", json=body, timeout=60)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_without_shifting_a_full_slot_ends_the_answer_truncated(plain: ServerThread) -> None:
    full = _complete(plain, 8, -1)
    assert (full["timings"]["predicted_n"], full["stop_type"], full["truncated"]) == (248, "limit", True)
    short = _complete(plain, 8, 64)
    assert (short["timings"]["predicted_n"], short["truncated"]) == (64, False)


def test_with_shifting_the_answer_goes_on_past_the_slot(shifting: ServerThread) -> None:
    result = _complete(shifting, 226, 96)
    assert (result["timings"]["prompt_n"], result["timings"]["predicted_n"], result["truncated"]) == (226, 96, True)
    assert _complete(shifting, 8, 64)["truncated"] is False  # the slot never filled


def test_a_prompt_the_slot_cannot_hold_is_refused_either_way(plain: ServerThread, shifting: ServerThread) -> None:
    for server in (plain, shifting):
        body = {"prompt": list(range(100, 400)), "n_predict": 4}
        response = httpx.post(server.url + "/completion", json=body, timeout=60)
        assert response.status_code == 400
        assert "exceeds the available context size" in response.json()["error"]["message"]
