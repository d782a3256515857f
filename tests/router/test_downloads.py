"""Models downloaded into a router and removed from it, over real HTTP, from a fake hub on loopback: ``POST /models``
with its events on ``/models/sse``, a cancel with ``/models/unload``, ``DELETE /models``, and Ollama's
``/api/pull`` and ``/api/delete`` through the official ``ollama`` client. One router (with an API key) serves the
module: each test leaves it as it found it, with nothing downloaded."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import ollama
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from lfmserve.errors import LfmError
from lfmserve.loading.hub_download import DownloadPlan, RepoFile
from lfmserve.router import downloads as downloads_module
from lfmserve.router.downloads import Downloads
from lfmserve.router.events import Events
from lfmserve.testing.hub import fake_hub
from tests.conftest import Running, ServerThread
from tests.router.conftest import entries, start_router

REPO = "LiquidAI/Tiny-VL-GGUF"
NAME = f"{REPO}:Q4_K_M"
MODEL_FILE, PROJECTOR_FILE = "Tiny-VL-Q4_K_M.gguf", "mmproj-Tiny-VL-F16.gguf"
KEY = "download-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


class GatedHub:
    """The fake hub, holding each file's GET (not the listing, not the HEAD) while ``gate`` is shut."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.url = ""
        self.gate = threading.Event()
        self.gate.set()
        self.held = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and "/resolve/" in scope["path"]:
            if not self.gate.is_set():
                self.held += 1
            await asyncio.to_thread(self.gate.wait)
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def hub_files(router_models: Path) -> dict[str, bytes]:
    """A vision model and its projector (the one the tiny vision model of the router's folder has)."""
    vision = router_models / "models" / "vision"
    return {
        MODEL_FILE: (vision / "model.gguf").read_bytes(),
        PROJECTOR_FILE: (vision / "mmproj-vision.gguf").read_bytes(),
        "Tiny-VL-Q8_0.gguf": b"not fetched",
    }


@pytest.fixture(scope="module")
def hub(hub_files: dict[str, bytes]) -> Iterator[GatedHub]:
    gated = GatedHub(fake_hub(REPO, hub_files))
    thread = ServerThread(gated).start()
    gated.url = thread.url
    try:
        yield gated
    finally:
        gated.gate.set()
        thread.stop()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf-cache")


@pytest.fixture(scope="module")
def router(router_models: Path, hub: GatedHub, cache: Path) -> Iterator[Running]:
    started: list[Running] = []
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(cache), "HF_HUB_DISABLE_TELEMETRY": "1"}
    try:
        yield start_router(started, router_models, "--api-key", KEY, env=env)
    finally:
        for running in started:
            running.stop()


class Listener:
    """``/models/sse`` read on a thread from before the test acts, until ``until`` says an event is the last."""

    def __init__(self, router: Running, until: Callable[[dict[str, Any]], bool]) -> None:
        self.seen: list[dict[str, Any]] = []
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._listen, args=(router, until), daemon=True)
        self._thread.start()
        assert self._listening.wait(30)

    def _listen(self, router: Running, until: Callable[[dict[str, Any]], bool]) -> None:
        with httpx.stream("GET", router.url + "/models/sse", headers=AUTH, timeout=120) as events:
            self._listening.set()
            for line in events.iter_lines():
                if line.startswith("data: "):
                    self.seen.append(json.loads(line[6:]))
                    if until(self.seen[-1]):
                        return

    def wait(self) -> list[dict[str, Any]]:
        self._thread.join(120)
        assert not self._thread.is_alive(), self.seen
        return self.seen


def _ends_download(event: dict[str, Any]) -> bool:
    return event["event"] in ("download_finished", "download_failed")


def _cached_ggufs(cache: Path) -> list[str]:
    """The GGUF names in the cache's snapshots and the cache's whole blobs (an entry points to a blob; a download
    cut short leaves an ``.incomplete`` one, which the next download of the file resumes)."""
    blobs = [p for p in cache.rglob("blobs/*") if p.suffix != ".incomplete"]
    return sorted(p.name for p in cache.rglob("snapshots/*/*.gguf")) + [f"{len(blobs)} blobs"]


def _url(hub: GatedHub, path: str) -> str:
    return f"{hub.url}/{REPO}/resolve/main/{path}"


def test_a_download_reports_its_progress_then_the_model_is_listed_answers_and_is_removed(
    router: Running, hub: GatedHub, hub_files: dict[str, bytes], cache: Path
) -> None:
    listener = Listener(router, _ends_download)
    started = httpx.post(router.url + "/models", json={"model": f"{REPO}:q4_k_m"}, headers=AUTH, timeout=60)
    assert (started.status_code, started.json()) == (200, {"success": True})
    seen = listener.wait()

    sizes = {_url(hub, name): len(hub_files[name]) for name in (MODEL_FILE, PROJECTOR_FILE)}
    assert (seen[0], seen[-2], seen[-1]) == (
        {"model": NAME, "event": "model_status", "data": {"status": "downloading"}},
        {"model": "*", "event": "models_reload"},  # the router lists it before it says it is done
        {"model": NAME, "event": "download_finished"},
    )
    progress = [event["data"]["progress"] for event in seen[1:-2]]
    assert {event["event"] for event in seen[1:-2]} == {"download_progress"}
    # each file is reported as it starts and as it ends (one chunk each: nothing between)
    assert progress == [
        {_url(hub, MODEL_FILE): {"done": 0, "total": sizes[_url(hub, MODEL_FILE)]}},
        {_url(hub, MODEL_FILE): {"done": sizes[_url(hub, MODEL_FILE)], "total": sizes[_url(hub, MODEL_FILE)]}},
        {
            _url(hub, MODEL_FILE): {"done": sizes[_url(hub, MODEL_FILE)], "total": sizes[_url(hub, MODEL_FILE)]},
            _url(hub, PROJECTOR_FILE): {"done": 0, "total": sizes[_url(hub, PROJECTOR_FILE)]},
        },
        {url: {"done": size, "total": size} for url, size in sizes.items()},
    ]
    entry = entries(router, **AUTH)[NAME]
    assert (entry["source"], entry["can_remove"], entry["status"]["value"]) == ("cache", True, "unloaded")
    assert entry["architecture"]["input_modalities"] == ["text", "image"]  # its projector came with it
    assert _cached_ggufs(cache) == [MODEL_FILE, PROJECTOR_FILE, "2 blobs"]

    again = httpx.post(router.url + "/models", json={"model": NAME}, headers=AUTH, timeout=60)
    assert (again.status_code, again.json()["error"]["message"]) == (400, f"model '{NAME}' already exists")
    body = {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    answered = httpx.post(router.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=120)
    assert answered.status_code == 200, answered.text
    loaded = httpx.delete(router.url + "/models", params={"model": NAME}, headers=AUTH, timeout=60)
    assert (loaded.status_code, loaded.json()["error"]["message"]) == (
        400,
        f"model '{NAME}' is loaded: unload it first (POST /models/unload)",
    )
    assert _cached_ggufs(cache) == [MODEL_FILE, PROJECTOR_FILE, "2 blobs"]

    httpx.post(router.url + "/models/unload", json={"model": NAME}, headers=AUTH, timeout=60).raise_for_status()
    _wait_unloaded(router, NAME)
    listener = Listener(router, lambda event: event["event"] == "model_remove")
    removed = httpx.delete(router.url + "/models", params={"model": NAME}, headers=AUTH, timeout=60)
    assert (removed.status_code, removed.json()) == (200, {"success": True})
    assert listener.wait()[-2:] == [{"model": "*", "event": "models_reload"}, {"model": NAME, "event": "model_remove"}]
    assert NAME not in entries(router, **AUTH)
    assert _cached_ggufs(cache) == [PROJECTOR_FILE, "1 blobs"]  # the quant's file and blob; its projector stays
    gone = httpx.delete(router.url + "/models", params={"model": NAME}, headers=AUTH, timeout=60)
    assert (gone.status_code, gone.json()["error"]["message"]) == (404, f"model '{NAME}' not found")


def _wait_unloaded(router: Running, name: str) -> None:
    deadline = time.monotonic() + 60
    while entries(router, **AUTH)[name]["status"]["value"] != "unloaded":
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_an_unload_cancels_a_download_and_nothing_of_it_is_listed(router: Running, hub: GatedHub, cache: Path) -> None:
    before = _cached_ggufs(cache)
    hub.gate.clear()
    try:
        listener = Listener(router, _ends_download)
        started = httpx.post(router.url + "/models", json={"model": NAME}, headers=AUTH, timeout=60)
        assert started.status_code == 200, started.text
        deadline = time.monotonic() + 60
        while hub.held == 0:  # its process asks for the model's bytes, which the hub holds
            assert time.monotonic() < deadline
            time.sleep(0.02)
        entry = entries(router, **AUTH)[NAME]
        assert (entry["status"]["value"], entry["source"]) == ("downloading", "cache")
        twice = httpx.post(router.url + "/models", json={"model": NAME}, headers=AUTH, timeout=60)
        assert (twice.status_code, twice.json()["error"]["message"]) == (
            400,
            f"model '{NAME}' is already being downloaded",
        )
        cancelled = httpx.post(router.url + "/models/unload", json={"model": NAME}, headers=AUTH, timeout=60)
        assert (cancelled.status_code, cancelled.json()) == (200, {"success": True})
        seen = listener.wait()
    finally:
        hub.gate.set()
    assert seen[-1] == {"model": NAME, "event": "download_failed", "data": {"error": "the download was cancelled"}}
    assert NAME not in entries(router, **AUTH)
    assert NAME not in (e["id"] for e in httpx.get(router.url + "/models?reload=1", headers=AUTH).json()["data"])
    assert _cached_ggufs(cache) == before


def test_downloads_and_removals_refused(router: Running, hub_files: dict[str, bytes]) -> None:
    def post(body: Any, headers: dict[str, str] = AUTH) -> tuple[int, str]:
        answer = httpx.post(router.url + "/models", json=body, headers=headers, timeout=60)
        return answer.status_code, answer.json()["error"]["message"]

    def delete(name: str, headers: dict[str, str] = AUTH) -> tuple[int, str]:
        answer = httpx.delete(router.url + "/models", params={"model": name}, headers=headers, timeout=60)
        return answer.status_code, answer.json()["error"]["message"]

    assert post({"model": NAME}, headers={})[0] == 401
    assert delete("text", headers={})[0] == 401
    assert post({"model": ""}) == (400, "model name is missing from the request")
    assert post({"model": "Tiny-VL-GGUF"}) == (
        400,
        "invalid Hugging Face repo 'Tiny-VL-GGUF': expected owner/name[:quant]",
    )
    assert post({"model": "LiquidAI/Nothing-GGUF"}) == (404, "Hugging Face repo not found: LiquidAI/Nothing-GGUF (404)")
    assert post({"model": f"{REPO}:Q2_K"}) == (
        404,
        f"no Q2_K GGUF in the repo (found: {', '.join(sorted(n for n in hub_files if 'mmproj' not in n))})",
    )
    assert post({"model": "text"}) == (400, "invalid Hugging Face repo 'text': expected owner/name[:quant]")
    assert delete("") == (400, "model name is missing from the request")
    assert delete("text") == (400, "model 'text' is not removable: only a model of the Hugging Face cache is")
    assert delete("nowhere/none:Q4_K_M") == (404, "model 'nowhere/none:Q4_K_M' not found")
    assert NAME not in entries(router, **AUTH)


def test_ollama_pulls_and_deletes_a_hub_model_with_its_own_client(
    router: Running, hub: GatedHub, hub_files: dict[str, bytes], cache: Path
) -> None:
    ollama_name = f"hf.co/{REPO}:Q4_K_M"
    fetched = (MODEL_FILE, PROJECTOR_FILE)
    digests = {f"sha256:{hashlib.sha256(hub_files[name]).hexdigest()}": len(hub_files[name]) for name in fetched}
    with ollama.Client(host=router.url, headers=AUTH) as client:
        lines = list(client.pull(ollama_name, stream=True))
        statuses = [line.status for line in lines]
        assert statuses[0] == "pulling manifest"
        assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
        layers = lines[1:-3]
        assert layers and all(line.status == f"pulling {(line.digest or '')[7:19]}" for line in layers)
        last = {line.digest: (line.completed, line.total) for line in layers}  # the last line of each file
        assert last == {digest: (size, size) for digest, size in digests.items()}
        answer = client.chat(ollama_name, messages=[{"role": "user", "content": "hi"}], options={"num_predict": 2})
        assert (answer.done_reason, answer.eval_count) == ("length", 2)
        assert client.pull(ollama_name, stream=False).status == "success"  # here already: done at once
        with pytest.raises(ollama.ResponseError) as loaded:
            client.delete(ollama_name)
        assert (loaded.value.status_code, loaded.value.error) == (
            400,
            f"model '{NAME}' is loaded: unload it first (POST /models/unload)",
        )
        client.generate(ollama_name, keep_alive=0)  # Ollama's way to unload
        assert client.delete(ollama_name).status == "success"
        with pytest.raises(ollama.ResponseError) as gone:
            client.delete(ollama_name)
        assert (gone.value.status_code, gone.value.error) == (404, f"model '{ollama_name}' not found")
        with pytest.raises(ollama.ResponseError) as store_only:
            client.pull("lfm2:latest")
        assert (store_only.value.status_code, store_only.value.error) == (404, "model 'lfm2:latest' not found")
        # not streamed: one answer, once the download is over and the router lists the model
        assert client.pull(f"hf.co/{REPO}", stream=False).status == "success"  # no tag: Q4_K_M
        assert entries(router, **AUTH)[NAME]["status"]["value"] == "unloaded"
        assert _cached_ggufs(cache) == [MODEL_FILE, PROJECTOR_FILE, "2 blobs"]
        assert client.delete(f"hf.co/{REPO}:latest").status == "success"
    assert NAME not in entries(router, **AUTH)
    assert _cached_ggufs(cache) == [PROJECTOR_FILE, "1 blobs"]


@pytest.mark.parametrize(
    ("exit_code", "refresh_error", "error"),
    [
        (0, LfmError("the preset cannot be read"), "LfmError: the preset cannot be read"),
        (3, None, "its process exited with 3"),
    ],
    ids=["reload-fails", "process-fails"],
)
def test_a_download_whose_end_goes_wrong_still_ends_and_says_why(
    monkeypatch: pytest.MonkeyPatch, exit_code: int, refresh_error: LfmError | None, error: str
) -> None:
    """In-process, with a download program that prints a line that is no report: the download ends failed, with
    the reason, whether its process failed or the router's models could not be read again after it."""
    monkeypatch.setattr(downloads_module, "FETCH_MODULE", "tests.router.fake_fetch")
    monkeypatch.setenv("LFMSERVE_FAKE_FETCH_EXIT", str(exit_code))
    plan = DownloadPlan(NAME, REPO, (RepoFile(MODEL_FILE, "u", 3, None),))
    events = Events()
    pool = SimpleNamespace(registry=SimpleNamespace(find=lambda name: None))

    async def refresh() -> None:
        if refresh_error is not None:
            raise refresh_error

    async def run() -> tuple[list[dict[str, Any]], bool | None, str | None, dict[str, Any] | None]:
        manager = Downloads(events, pool, None, refresh)  # type: ignore[arg-type]
        seen: list[dict[str, Any]] = []

        async def listen() -> None:
            async for event in events.listen():
                seen.append(event)
                if _ends_download(event):
                    return

        listener = asyncio.create_task(listen())
        await asyncio.sleep(0)  # the listener is registered before the download starts
        download = await manager.start(plan)
        await asyncio.wait_for(listener, 60)
        return seen, download.succeeded, download.error, manager.get(NAME)

    seen, succeeded, reason, running = asyncio.run(run())
    url = f"http://hub/{REPO}/{MODEL_FILE}"
    assert seen == [
        {"model": NAME, "event": "model_status", "data": {"status": "downloading"}},
        {"model": NAME, "event": "download_progress", "data": {"progress": {url: {"done": 3, "total": 3}}}},
        {"model": NAME, "event": "download_failed", "data": {"error": error}},
    ]
    assert (succeeded, reason, running) == (False, error, None)
