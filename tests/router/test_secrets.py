"""The router's secrets and its gate, over real processes: the API key however it is given, and the Hugging Face
token, appear in no listing, log line, command line or environment of the fork server and the children; a child
takes only its own key; listing and managing the models need the key; a reload stops what it drops; a router that
cannot start as asked exits non-zero."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from lfmserve.testing.hub import fake_hub
from tests.conftest import Running, ServerThread, wait_healthy
from tests.router.conftest import CHILD_FLAGS, child_pid, descendants, start_router
from tests.test_cli import LFMSERVE

ROUTER_KEY = "router-key-7Qx2"
#: In the environment beside the command line's key: only the command line's may count.
STALE_KEY = "stale-env-key-3Jp8"
HF_SECRET = "hf_secret_token_9Zk4"
SECRETS = (ROUTER_KEY, STALE_KEY, HF_SECRET)
#: How each case gives the router its key: flags, and variables (``{file}`` is a file holding the key).
KEY_SOURCES: dict[str, tuple[list[str], dict[str, str]]] = {
    "--api-key": (["--api-key", ROUTER_KEY], {"LFMSERVE_API_KEY": STALE_KEY}),
    "--api-key-file": (["--api-key-file", "{file}"], {}),
    "LFMSERVE_API_KEY": ([], {"LFMSERVE_API_KEY": ROUTER_KEY}),
    "LLAMA_API_KEY": ([], {"LLAMA_API_KEY": ROUTER_KEY}),
}
KEYED = {"Authorization": f"Bearer {ROUTER_KEY}"}
HELLO = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _proc(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


@pytest.mark.parametrize("source", list(KEY_SOURCES))
def test_the_key_and_the_hub_token_stay_in_the_router(
    running: list[Running], router_models: Path, tmp_path: Path, source: str
) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text(ROUTER_KEY + "\n")
    flags, env = KEY_SOURCES[source]
    flags = [flag.replace("{file}", str(key_file)) for flag in flags]
    # cold: the router's own /proc/PID/environ and cmdline are read (a warm start's show its helper's)
    router = start_router(running, router_models, *flags, env={**env, "HF_TOKEN": HF_SECRET}, cold=True)

    refused = [("GET", "/models"), ("GET", "/v1/models"), ("GET", "/models?reload=1"), ("GET", "/running")]
    refused += [("POST", "/models/load"), ("POST", "/models/unload"), ("DELETE", "/models"), ("GET", "/unload")]
    refused += [("GET", "/api/tags"), ("GET", "/props")]
    answers = [httpx.request(method, router.url + path, json={"model": "text"}) for method, path in refused]
    assert [a.status_code for a in answers] == [401] * len(refused)
    unauthorized = {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}
    assert [a.json() for a in answers] == [unauthorized] * 8 + [{"error": "Invalid API Key"}, unauthorized]
    assert httpx.get(router.url + "/health").status_code == 200
    stale = httpx.post(
        router.url + "/v1/chat/completions", json={"model": "text", **HELLO}, headers={"X-Api-Key": STALE_KEY}
    )
    assert stale.status_code == 401
    answered = httpx.post(
        router.url + "/v1/chat/completions", json={"model": "text", **HELLO}, headers=KEYED, timeout=120
    )
    assert answered.status_code == 200, answered.text

    listings = [httpx.get(router.url + path, headers=KEYED, timeout=30) for path in ("/models", "/v1/models")]
    listings += [httpx.get(router.url + path, headers=KEYED, timeout=30) for path in ("/props", "/props?model=text")]
    listings += [httpx.get(router.url + "/running", headers=KEYED, timeout=30)]
    assert [listing.status_code for listing in listings] == [200] * 5
    entry = next(e for e in listings[1].json()["data"] if e["id"] == "text")
    assert entry["status"]["value"] == "loaded"
    shown = " ".join(listing.text for listing in listings) + router.log()
    assert [secret for secret in SECRETS if secret in shown] == []
    assert str(key_file) not in shown

    child = child_pid(router, "text")
    below = descendants(router.process.pid)
    assert child is not None and child in below and len(below) >= 2  # the fork server, and the model's child
    assert HF_SECRET.encode() in _proc(router.process.pid, "environ")  # what the router itself was started with
    leaks = [
        (pid, name, secret)
        for pid in below
        for name in ("environ", "cmdline")
        for secret in SECRETS
        if secret.encode() in _proc(pid, name)
    ]
    assert leaks == []

    args = entry["status"]["args"]
    child_url = f"http://127.0.0.1:{args[args.index('--port') + 1]}"
    direct = httpx.post(child_url + "/v1/chat/completions", json=HELLO, headers=KEYED, timeout=30)
    assert (direct.status_code, direct.json()["error"]["message"]) == (401, "Invalid API Key")


def test_a_child_downloads_a_gated_model_with_the_routers_hub_token(
    running: list[Running], router_models: Path, tmp_path: Path
) -> None:
    repo = "LiquidAI/Gated-Tiny-GGUF"
    weights = (router_models / "models" / "text.gguf").read_bytes()
    hub = ServerThread(fake_hub(repo, {"Gated-Tiny-Q4_K_M.gguf": weights}, token=HF_SECRET)).start()
    preset = tmp_path / "preset.ini"
    preset.write_text(f"[gated]\nhf-repo = {repo}\nno-mmproj = true\n")
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    try:
        without = start_router(running, router_models, preset=preset, env=env)
        refused = httpx.post(without.url + "/v1/chat/completions", json={"model": "gated", **HELLO}, timeout=120)
        assert (refused.status_code, refused.json()["error"]["message"]) == (
            500,
            f"model name=gated failed to load: Hugging Face repo or file not found: {repo} (401)",
        )
        router = start_router(running, router_models, preset=preset, env={**env, "HF_TOKEN": HF_SECRET})
        answered = httpx.post(router.url + "/v1/chat/completions", json={"model": "gated", **HELLO}, timeout=120)
        assert answered.status_code == 200, answered.text
        child = child_pid(router, "gated")
        assert child is not None and HF_SECRET.encode() not in _proc(child, "environ")
    finally:
        hub.stop()


def test_a_reload_stops_the_running_model_whose_file_vanished(
    running: list[Running], router_models: Path, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(router_models / "models" / "text.gguf", models / "gone.gguf")
    assert LFMSERVE is not None
    router = Running([LFMSERVE, "--models-dir", str(models), *CHILD_FLAGS], env={"HF_HUB_CACHE": str(tmp_path / "hf")})
    running.append(router)
    wait_healthy(router.url, router.process)
    assert (
        httpx.post(router.url + "/v1/chat/completions", json={"model": "gone", **HELLO}, timeout=120).status_code == 200
    )
    pid = child_pid(router, "gone")
    assert pid is not None

    (models / "gone.gguf").unlink()
    reloaded = httpx.get(router.url + "/models?reload=1", timeout=60)
    assert (reloaded.status_code, reloaded.json()["data"]) == (200, [])
    assert not Path(f"/proc/{pid}").exists()  # stopped and reaped before the answer
    assert [p for p in descendants(router.process.pid) if _proc(p, "comm").startswith(b"lfm:")] == []
    assert httpx.get(router.url + "/running").json() == {"running": []}
    missing = httpx.post(router.url + "/v1/chat/completions", json={"model": "gone", **HELLO})
    assert (missing.status_code, missing.json()["error"]["message"]) == (400, "model 'gone' not found")


def test_a_router_that_cannot_start_its_startup_models_exits_1_with_one_line(
    router_models: Path, tmp_path: Path
) -> None:
    model = router_models / "models" / "text.gguf"
    preset = tmp_path / "preset.ini"
    preset.write_text(f"[a]\nmodel = {model}\nload-on-startup = true\n\n[b]\nmodel = {model}\nload-on-startup = true\n")
    assert LFMSERVE is not None
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hf")}
    done = subprocess.run(
        [LFMSERVE, "--models-preset", str(preset), "--models-max", "1", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert [line for line in done.stderr.splitlines() if " INFO " not in line] == [
        "lfmserve: error: number of models to load on startup (2) exceeds models_max (1)"
    ]
