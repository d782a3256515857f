"""A router started in an Ollama user's environment, over real HTTP: it listens where ``OLLAMA_HOST`` says (its
children where it tells them), gives each model ``OLLAMA_NUM_PARALLEL`` slots of ``OLLAMA_CONTEXT_LENGTH`` tokens,
keeps ``OLLAMA_MAX_LOADED_MODELS`` loaded, unloads an idle one after ``OLLAMA_KEEP_ALIVE``, allows
``OLLAMA_ORIGINS`` and Ollama's local origins, and logs each variable once with what it became."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from lfmserve.settings.ollama_env import OLLAMA_LOCAL_ORIGINS
from lfmserve.testing import TinyLfm2, free_port, write_lfm2_gguf
from tests.conftest import LFMSERVE, Running, wait_healthy
from tests.router.conftest import chat, entries, wait_status

PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "Content-Type"}


@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    models = tmp_path_factory.mktemp("ollama-env") / "models"
    models.mkdir()
    for name in ("first", "second"):
        write_lfm2_gguf(models / f"{name}.gguf", TinyLfm2(seed=1))
    return models


@pytest.mark.slow  # a router and two children (about 5 s)
def test_a_router_serves_as_ollamas_variables_say(running: list[Running], two_models: Path, tmp_path: Path) -> None:
    port = free_port()
    store = tmp_path / "ollama"  # an empty store
    store.mkdir()
    environ = {
        "OLLAMA_HOST": f"127.0.0.1:{port}",
        "OLLAMA_NUM_PARALLEL": "2",
        "OLLAMA_CONTEXT_LENGTH": "256",
        "OLLAMA_MAX_LOADED_MODELS": "1",
        "OLLAMA_KEEP_ALIVE": "2s",
        "OLLAMA_MAX_QUEUE": "7",
        "OLLAMA_FLASH_ATTENTION": "false",
        "OLLAMA_KV_CACHE_TYPE": "F32",
        "OLLAMA_ORIGINS": "http://app.example",
        "OLLAMA_DEBUG": "0",
        "OLLAMA_MODELS": str(store),
        "LFMSERVE_MODELS_OLLAMA_ENABLED": "1",
        # no model but the folder's, on a machine with models in a cache or LM Studio's folder too
        "HF_HUB_CACHE": str(tmp_path / "hf-cache"),
        "LFMSERVE_MODELS_LMSTUDIO_ENABLED": "0",
    }
    assert LFMSERVE is not None
    router = Running([LFMSERVE, "--models-dir", str(two_models), "--threads", "1", "--no-ui"], env=environ, port=port)
    running.append(router)
    wait_healthy(router.url, router.process)  # at OLLAMA_HOST's port: no --port was given

    origins = ",".join(["http://app.example", *OLLAMA_LOCAL_ORIGINS])
    for line in [
        f"OLLAMA_HOST=127.0.0.1:{port}: --host 127.0.0.1 --port {port}",
        "OLLAMA_NUM_PARALLEL=2: --parallel 2",
        "OLLAMA_CONTEXT_LENGTH=256: --ctx-size 512; 256 a slot, times --parallel 2",
        "OLLAMA_MAX_LOADED_MODELS=1: --models-max 1",
        "OLLAMA_KEEP_ALIVE=2s: --models-ttl 2",
        "OLLAMA_MAX_QUEUE=7: --max-queue 7",
        "OLLAMA_FLASH_ATTENTION=false: --flash-attn off",
        "OLLAMA_KV_CACHE_TYPE=F32: --cache-type-k f32 --cache-type-v f32",
        f"OLLAMA_ORIGINS=http://app.example: --cors-origins {origins}",
        "OLLAMA_DEBUG=0: --log-verbosity 3",
        f"OLLAMA_MODELS={store}: --models-ollama {store}",
    ]:
        assert router.log().count(f"{line}\n") == 1, (line, router.log())

    def allowed(origin: str) -> str | None:
        headers = {"Origin": origin, **PREFLIGHT}
        return httpx.options(router.url + "/v1/chat/completions", headers=headers, timeout=10).headers.get(
            "access-control-allow-origin"
        )

    assert [allowed(o) for o in ("http://app.example", "http://localhost:3000", "http://evil.example")] == [
        "http://app.example",
        "http://localhost:3000",
        None,
    ]

    assert chat(router, "first").status_code == 200
    args = entries(router)["first"]["status"]["args"]
    # after the program: the loopback port the router chose, not OLLAMA_HOST's
    assert args[1:5] == ["--host", "127.0.0.1", "--port", args[4]] and args[4] != str(port)
    for flag, value in [
        ("--parallel", "2"),
        ("--ctx-size", "512"),
        ("--flash-attn", "off"),
        ("--cache-type-k", "f32"),
        ("--cache-type-v", "f32"),
        ("--max-queue", "7"),
    ]:
        assert args[args.index(flag) + 1] == value
    props = httpx.get(router.url + "/props", params={"model": "first"}, timeout=60).json()
    assert (props["total_slots"], props["default_generation_settings"]["n_ctx"]) == (2, 256)

    assert chat(router, "second").status_code == 200  # one model at most: the first makes room
    assert {name: entry["status"]["value"] for name, entry in entries(router).items()} == {
        "first": "unloaded",
        "second": "loaded",
    }
    (kept,) = httpx.get(router.url + "/running", timeout=10).json()["running"]
    assert (kept["model"], kept["ttl"]) == ("second", 2)
    idle_since = time.monotonic()
    status = wait_status(router, "second", "unloaded", timeout_s=30)["status"]
    assert "failed" not in status and time.monotonic() - idle_since >= 1.5
    assert re.search(r"unloading second: idle for [23] s\n", router.log())  # checked each second from 2 s on
