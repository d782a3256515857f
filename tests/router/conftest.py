"""A router over real children: a folder of tiny models (text, vision with its projector, audio with its projector)
and a preset that adds an embedding model, served by ``lfmserve`` started with no model, as a real process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.router.link import process_name
from lfmserve.testing import TinyLfm2, TinyProjector, write_lfm2_gguf, write_mmproj_gguf
from tests.conftest import LFMSERVE, Running, wait_healthy

#: Every child on one thread and one slot: several run at once on the test machine's two cores.
CHILD_FLAGS = ["--threads", "1", "--parallel", "1", "--no-ui"]


@pytest.fixture(scope="session")
def router_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``text.gguf``, ``vision/`` and ``audio/`` (each a model and its ``mmproj``), and ``preset.ini``."""
    root = tmp_path_factory.mktemp("router")
    models = root / "models"
    models.mkdir()
    write_lfm2_gguf(models / "text.gguf", TinyLfm2(seed=1))
    for kind in ("vision", "audio"):
        (models / kind).mkdir()
        write_lfm2_gguf(models / kind / "model.gguf", TinyLfm2(seed=1, vision_tokens=True, name=f"Tiny-{kind}"))
        write_mmproj_gguf(models / kind / f"mmproj-{kind}.gguf", TinyProjector(kind=kind))  # type: ignore[arg-type]
    (root / "preset.ini").write_text(
        "version = 1\n\n"
        "[*]\nctx-size = 2048\n\n"
        "[text]\nalias = lfm-text,chat\n\n"
        f"[embed]\nmodel = {models / 'text.gguf'}\nembeddings = true\npooling = mean\nalias = embedder\n"
        "ctx-size = 512\n"
    )
    return root


def start_router(
    running: list[Running],
    router_models: Path,
    *flags: str,
    preset: Path | None = None,
    env: dict[str, str] | None = None,
    child_flags: list[str] = CHILD_FLAGS,
    cold: bool = False,
) -> Running:
    """``lfmserve --models-dir MODELS --models-preset PRESET`` with ``child_flags`` and ``flags`` (the preset of
    ``router_models`` unless another is given) and ``env`` added to the environment, healthy. The router's flags
    outweigh a preset's: a test of a preset's ``parallel`` passes ``child_flags`` without ``--parallel``. ``cold``:
    an exec'd process (:class:`~tests.conftest.Running`)."""
    assert LFMSERVE is not None
    router = Running(
        [
            LFMSERVE,
            "--models-dir",
            str(router_models / "models"),
            "--models-preset",
            str(preset or router_models / "preset.ini"),
            *child_flags,
            *flags,
        ],
        # No Ollama store or LM Studio folder: a machine with either installed would add its models to the exact lists.
        env={
            "HF_HUB_CACHE": str(router_models / "hf-cache"),
            "LFMSERVE_MODELS_OLLAMA_ENABLED": "0",
            "LFMSERVE_MODELS_LMSTUDIO_ENABLED": "0",
            **(env or {}),
        },
        cold=cold,
    )
    running.append(router)
    wait_healthy(router.url, router.process)
    return router


@pytest.fixture
def router(running: list[Running], router_models: Path) -> Iterator[Running]:
    yield start_router(running, router_models)


@pytest.fixture(scope="module")
def module_router(router_models: Path) -> Iterator[Running]:
    """One router for a module's tests (a router's start and stop are a second and a half of the suite's time
    each); :func:`idle_router` hands it over with no model loaded."""
    started: list[Running] = []
    yield start_router(started, router_models)
    for process in started:
        process.stop()


@pytest.fixture
def idle_router(module_router: Running) -> Running:
    """The module's router with every model unloaded first: a test finds it as a fresh router but for what a router
    counts (its metrics, its event stream's past). A module whose tests need no more uses it as its ``router``."""
    running = [name for name, entry in entries(module_router).items() if entry["status"]["value"] != "unloaded"]
    for name in running:  # an alias's entry shows its model's status: unloading the model unloads both
        response = httpx.post(module_router.url + "/models/unload", json={"model": name}, timeout=30)
        assert response.status_code == 200 or "not running" in response.text, response.text
    for name in running:
        wait_status(module_router, name, "unloaded")
    return module_router


def entries(router: Running, **headers: str) -> dict[str, dict[str, Any]]:
    response = httpx.get(router.url + "/v1/models", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return {entry["id"]: entry for entry in response.json()["data"]}


def wait_status(router: Running, model: str, wanted: str, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        entry = entries(router)[model]
        if entry["status"]["value"] == wanted:
            return entry
        time.sleep(0.05)
    raise AssertionError(f"{model} never became {wanted}: {entries(router)[model]['status']}")


def chat(router: Running, model: str, **options: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, **options}
    return httpx.post(router.url + "/v1/chat/completions", json=body, timeout=120)


def child_pid(router: Running, model: str) -> int | None:
    """The process id of the model's child: a process its fork server forked, named after the model."""
    for pid in _children(router.process.pid):
        for child in _children(pid):
            if Path(f"/proc/{child}/comm").read_bytes().strip() == process_name(model):
                return child
    return None


def descendants(parent: int) -> list[int]:
    """Every process started below ``parent``: a router's fork server and its children, among them."""
    found = []
    for child in _children(parent):
        found += [child, *descendants(child)]
    return found


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry.name))
    return found
