"""The router over HTTP: what it lists, how it routes by model name and alias, its errors, and the models'
lifecycle (load, unload, events, eviction at --models-max), against real children of tiny models."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import LFMSERVE, Running
from tests.router.conftest import chat, entries, start_router, wait_status


@pytest.fixture
def router(idle_router: Running) -> Running:
    """The module's shared router, no model loaded (tests/router/conftest.py): these tests change nothing else."""
    return idle_router


def test_lists_every_model_with_its_settings_before_any_loads(router: Running, router_models: Path) -> None:
    models = router_models / "models"
    listed = entries(router)
    assert sorted(listed) == ["audio", "embed", "text", "vision"]
    text = listed["text"]
    assert text["aliases"] == ["chat", "lfm-text"]
    assert text["source"] == "preset"  # found in the folder, given a section by the preset
    assert listed["vision"]["source"] == "models_dir"
    assert text["status"]["value"] == "unloaded"
    assert text["meta"] == {"n_ctx": 2048, "n_ctx_train": 4096}  # read from its file: what its child will report
    assert text["status"]["args"][0] == LFMSERVE
    assert text["status"]["args"][1:] == [
        "--host", "127.0.0.1", "--port", "0",
        "--model", str(models / "text.gguf"), "--alias", "text",
        "--ctx-size", "2048", "--parallel", "1", "--threads", "1",
        "--no-webui", "--jinja",
    ]  # fmt: skip
    assert listed["embed"]["status"]["args"][5:] == [
        "--model", str(models / "text.gguf"), "--alias", "embed",
        "--embeddings", "--pooling", "mean",
        "--ctx-size", "512", "--parallel", "1", "--threads", "1",
        "--no-webui", "--jinja",
    ]  # fmt: skip
    assert {name: entry["architecture"]["input_modalities"] for name, entry in listed.items()} == {
        "audio": ["text", "audio"],
        "embed": ["text"],
        "text": ["text"],
        "vision": ["text", "image"],
    }
    assert listed["embed"]["status"]["preset"] == (
        f"[embed]\nmodel = {models / 'text.gguf'}\nembeddings = true\npooling = mean\n"
        "ctx-size = 512\nparallel = 1\nthreads = 1\nno-webui = true\n\n"
    )


def test_a_request_loads_its_model_by_alias_and_the_listing_shows_it_loaded(router: Running) -> None:
    reply = chat(router, "lfm-text", temperature=0)
    assert reply.status_code == 200, reply.text
    assert reply.json()["model"] == "text"
    entry = entries(router)["text"]
    assert entry["status"]["value"] == "loaded"
    assert entry["meta"]["n_ctx"] == 2048  # one slot: the whole context is one request's
    assert entries(router)["vision"]["status"]["value"] == "unloaded"
    assert "memory" not in entries(router)["vision"]["status"]
    memory = entry["status"]["memory"]  # the child's; what it holds: its heap and its model file's pages
    assert sorted(memory) == ["anonymous", "file_backed", "held", "pss", "resident"]
    assert memory["resident"] == memory["anonymous"] + memory["file_backed"]
    assert memory["anonymous"] < memory["held"] < memory["resident"]


def test_the_router_answers_props_itself_without_a_model_and_passes_it_on_with_one(router: Running) -> None:
    own = httpx.get(router.url + "/props", timeout=10).json()
    assert own["role"] == "router"
    assert own["max_instances"] == 4
    assert own["models_autoload"] is True
    assert own["build_info"].startswith("b")
    props = httpx.get(router.url + "/props", params={"model": "chat"}, timeout=60).json()
    assert props["model_alias"] == "text"
    assert props["default_generation_settings"]["n_ctx"] == 2048


def test_client_mistakes_are_400s_naming_the_problem(router: Running) -> None:
    missing = httpx.post(router.url + "/v1/chat/completions", json={"messages": []}, timeout=10)
    assert (missing.status_code, missing.json()["error"]["message"]) == (400, "model name is missing from the request")
    unknown = chat(router, "nope")
    assert (unknown.status_code, unknown.json()["error"]["message"]) == (400, "model 'nope' not found")
    load = httpx.post(router.url + "/models/load", json={"model": "nope"}, timeout=10)
    assert (load.status_code, load.json()["error"]["type"]) == (404, "not_found_error")
    unload = httpx.post(router.url + "/models/unload", json={"model": "text"}, timeout=10)
    assert (unload.status_code, unload.json()["error"]["message"]) == (400, "model is not running")
    broken = httpx.post(router.url + "/models/load", content=b"{", timeout=10)
    assert (broken.status_code, broken.json()["error"]["message"]) == (
        400,
        "invalid JSON body: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
    )
    for body in ({"model": 7}, {"model": ""}, ["text"]):
        named = httpx.post(router.url + "/models/load", json=body, timeout=10)
        assert (named.status_code, named.json()["error"]["message"]) == (400, "model name is missing from the request")
    not_json = httpx.post(router.url + "/v1/chat/completions", content=b"\xff\x00", timeout=10)
    assert (not_json.status_code, not_json.json()["error"]["message"]) == (
        400,
        "model name is missing from the request",
    )
    download = httpx.post(router.url + "/models", json={"model": "repo:Q4_K_M"}, timeout=10)
    assert (download.status_code, download.json()["error"]["message"]) == (
        400,
        "invalid Hugging Face repo 'repo:Q4_K_M': expected owner/name[:quant]",
    )


def test_load_and_unload_send_their_events(router: Running) -> None:
    seen: list[dict[str, Any]] = []
    listening = threading.Event()

    def listen() -> None:
        with httpx.stream("GET", router.url + "/models/sse", timeout=60) as events:
            listening.set()
            for line in events.iter_lines():
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
                    if seen[-1].get("data", {}).get("status") == "unloaded":
                        return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert listening.wait(10)
    assert httpx.post(router.url + "/models/load", json={"model": "vision"}, timeout=10).json() == {"success": True}
    again = httpx.post(router.url + "/models/load", json={"model": "vision"}, timeout=10)
    assert (again.status_code, again.json()["error"]["message"]) == (400, "model is already running")
    wait_status(router, "vision", "loaded")
    assert httpx.post(router.url + "/models/unload", json={"model": "vision"}, timeout=10).json() == {"success": True}
    listener.join(60)
    assert [(e["model"], e["event"], e["data"]["status"]) for e in seen] == [
        ("vision", "model_status", "loading"),
        ("vision", "status_change", "loaded"),
        ("vision", "status_change", "unloaded"),
    ]
    assert seen[1]["data"]["info"]["id"] == "vision"
    assert seen[2]["data"]["exit_code"] == 0
    status = entries(router)["vision"]["status"]
    assert (status["value"], sorted(status)) == ("unloaded", ["args", "preset", "value"])  # not failed


def test_the_least_recently_used_idle_model_is_unloaded_at_models_max(
    running: list[Running], router_models: Path
) -> None:
    router = start_router(running, router_models, "--models-max", "2")
    for model in ("text", "vision", "text", "audio"):
        assert chat(router, model).status_code == 200
    statuses = {name: entry["status"]["value"] for name, entry in entries(router).items()}
    assert statuses == {"audio": "loaded", "embed": "unloaded", "text": "loaded", "vision": "unloaded"}
