"""``POST /props``: allowed only with ``--props``, where llama-server changes nothing yet and says so with success;
``GET /props``' ``memory``, lfmserve's own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
from gguf import GGUFReader

from lfmserve.settings import Settings
from tests.conftest import ServerThread, post


def test_changing_props_needs_the_flag(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    closed = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1))
    refused = post(closed, "/props", {"n_predict": 4})
    assert (refused.status_code, refused.json()) == (
        501,
        {
            "error": {
                "code": 501,
                "message": "This server does not support changing global properties. Start it with `--props`",
                "type": "not_supported_error",
            }
        },
    )
    opened = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1, props=True))
    before = httpx.get(opened.url + "/props").json()
    accepted = post(opened, "/props", {"default_generation_settings": {"params": {"temperature": 2.0}}})
    assert (accepted.status_code, accepted.json()) == (200, {"success": True})
    after = httpx.get(opened.url + "/props").json()
    del before["memory"], after["memory"]  # the process's memory is live
    assert after == before  # nothing can be changed yet, as in llama-server


def test_props_memory_is_the_processs_and_llama_cpps_buffers(
    server_factory: Callable[[Settings], ServerThread], tiny_gguf: Path
) -> None:
    server = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=4096, parallel=1, threads=1))
    memory = httpx.get(server.url + "/props").json()["memory"]
    # The tiny LFM2's two attention layers keep 4096 cells of 2 KV heads of 16 dimensions, K and V, in F16.
    assert memory["kv_cache"] == 2 * 4096 * (2 * 16) * 2 * 2
    assert memory["weights"] == sum(int(tensor.n_bytes) for tensor in GGUFReader(tiny_gguf).tensors)
    assert (memory["weights_repacked"], memory["weights_released"]) == (0, 0)  # F32 weights: none repacked
    assert memory["resident"] == memory["anonymous"] + memory["file_backed"] and memory["compute"] > 0
