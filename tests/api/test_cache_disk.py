"""``--cache-disk`` over real HTTP: a server stopped and started again finds its prompt on disk (the long system
prompt is not prefilled again, ``cached_tokens`` and ``timings.cache_n`` say so, and the answer is the same), and
one with another context size, or a corrupt file, starts cold without failing."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.settings import Settings
from tests.conftest import serve

SYSTEM = " ".join(f"Rule {i}: answer briefly and kindly about the sea, the sky and the ships." for i in range(30))
CHAT = {
    "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello?"}],
    "max_tokens": 6,
    "temperature": 0,
}


def _answer(model: Path, folder: Path, ctx_size: int = 2048) -> dict[str, Any]:
    """One chat on a fresh server with ``--cache-disk folder``; the server is stopped after it."""
    settings = Settings.of(model=str(model), ctx_size=ctx_size, parallel=1, threads=2, cache_disk=str(folder))
    server = serve(settings)
    try:
        server.wait_ready()
        response = httpx.post(server.url + "/v1/chat/completions", json=CHAT, timeout=60)
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer
    finally:
        server.stop()


def test_a_restarted_server_finds_its_prompt_on_disk(tiny_gguf: Path, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    first = _answer(tiny_gguf, folder)
    n_prompt = first["usage"]["prompt_tokens"]
    assert n_prompt > 300 and first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert len(list(folder.glob("*/*.lfmcache"))) == 1  # written at shutdown, in the subfolder of its model
    again = _answer(tiny_gguf, folder)
    assert again["choices"][0]["message"] == first["choices"][0]["message"]
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == n_prompt == again["timings"]["cache_n"]
    assert again["timings"]["prompt_n"] == 0  # nothing decoded again: the prompt's last logits were kept too


@pytest.mark.slow  # three more server starts
def test_another_context_or_a_corrupt_file_starts_cold(tiny_gguf: Path, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    first = _answer(tiny_gguf, folder)
    other = _answer(tiny_gguf, folder, ctx_size=4096)  # a slot of another size: another identity
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert len(list(folder.iterdir())) == 2  # its own subfolder beside the first server's
    assert other["choices"][0]["message"] == first["choices"][0]["message"]
    corrupt = tmp_path / "corrupt"
    shutil.copytree(folder, corrupt)
    for path in corrupt.glob("*/*.lfmcache"):
        data = bytearray(path.read_bytes())
        data[-100] ^= 0xFF
        path.write_bytes(bytes(data))
    cold = _answer(tiny_gguf, corrupt)
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert cold["choices"][0]["message"] == first["choices"][0]["message"]
