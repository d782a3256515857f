"""Large bodies are parsed and prepared off the event loop: other requests are answered meanwhile."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx

from lfmserve.api.offload import OFF_LOOP_BYTES, Offload
from tests.conftest import ServerThread


def test_small_work_runs_inline_and_large_work_in_a_worker_thread() -> None:
    async def where(offload: Offload) -> str:
        return await offload(lambda: threading.current_thread().name)

    loop_thread = asyncio.run(where(Offload(large=False)))
    worker_thread = asyncio.run(where(Offload(large=True)))
    assert loop_thread == threading.main_thread().name and worker_thread != loop_thread


def test_health_answers_while_a_huge_prompt_is_tokenized(tiny_server: ServerThread) -> None:
    """A 4 MB prompt takes about a second to tokenize; /health is answered meanwhile, not in its wake."""
    body = json.dumps({"messages": [{"role": "user", "content": "word " * 800_000}], "max_tokens": 1}).encode()
    assert len(body) > OFF_LOOP_BYTES
    t0 = time.perf_counter()
    answered: dict[str, float] = {}
    responses: list[httpx.Response] = []

    def big() -> None:
        url, headers = tiny_server.url + "/v1/chat/completions", {"content-type": "application/json"}
        responses.append(httpx.post(url, content=body, headers=headers, timeout=120))
        answered["big"] = time.perf_counter() - t0

    thread = threading.Thread(target=big)
    thread.start()
    time.sleep(0.2)  # the big body is uploaded and being tokenized
    health = httpx.get(tiny_server.url + "/health", timeout=60)
    answered["health"] = time.perf_counter() - t0
    thread.join(timeout=120)
    assert responses[0].json()["error"]["type"] == "exceed_context_size_error" and health.status_code == 200
    # On the event loop, /health would wait for the whole tokenization and come back just after it.
    assert answered["health"] < answered["big"] / 2
