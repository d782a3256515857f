"""What a router refuses at its door, before any model loads: an Ollama ``keep_alive`` that is no finite duration
(the single server's 400, and ``/api/ps`` keeps answering), a path no model answers (llama-server's 404, model
named or not), a preset's router key with a bad value; and a Hugging Face cache it cannot read, named in a warning
rather than silently listing nothing."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute

from lfmserve.api.app import create_app
from lfmserve.errors import LfmError
from lfmserve.router.catalog import build_catalog, scan_cache
from lfmserve.settings import Settings
from tests.api.ollama.test_server import BAD_KEEP_ALIVES, KEEP_ALIVE_REFUSED
from tests.conftest import Running
from tests.router.conftest import entries
from tests.router.test_catalog import _cache_model


@pytest.fixture
def router(idle_router: Running) -> Running:
    """The module's shared router, no model loaded (tests/router/conftest.py): these tests change nothing else."""
    return idle_router


OLLAMA_PATHS = ("/api/chat", "/api/generate", "/api/embed", "/api/embeddings")


def _ps_names(router: Running) -> list[str]:
    response = httpx.get(router.url + "/api/ps", timeout=30)
    assert response.status_code == 200, response.text
    return [entry["name"] for entry in response.json()["models"]]


def test_a_keep_alive_that_is_no_finite_duration_is_a_400_and_ps_keeps_answering(router: Running) -> None:
    loaded = httpx.post(router.url + "/api/generate", json={"model": "text", "keep_alive": "10m"}, timeout=120)
    assert (loaded.status_code, loaded.json()["done_reason"]) == (200, "load")
    for model in ("text", "audio"):  # loaded, and not: neither is touched
        for path in OLLAMA_PATHS:
            for raw, shown in BAD_KEEP_ALIVES:
                body = f'{{"model": "{model}", "keep_alive": {raw}}}'
                response = httpx.post(router.url + path, content=body, timeout=30)
                assert (response.status_code, response.json()) == (400, {"error": KEEP_ALIVE_REFUSED.format(shown)})
    assert _ps_names(router) == ["text:latest"]
    assert entries(router)["audio"]["status"]["value"] == "unloaded"


def test_ollamas_other_fields_are_checked_with_the_single_servers_models(router: Running) -> None:
    for path, body, error in (
        ("/api/chat", '{"model": "audio", "messages": 5}', "'messages': Input should be a valid array (got 5)"),
        ("/api/generate", '{"model": "audio", "stream": "no"}', "'stream': Input should be a valid boolean (got 'no')"),
        ("/api/show", '{"model": ["audio"]}', "'model': Input should be a valid string (got ['audio'])"),
        ("/api/pull", '{"model": "audio", "stream": 0}', "'stream': Input should be a valid boolean (got 0)"),
    ):
        response = httpx.post(router.url + path, content=body, timeout=30)
        assert (response.status_code, response.json()) == (400, {"error": "Invalid value for " + error}), body
    for path, body, error in (
        ("/api/embed", "[]", "Invalid request body: Input should be an object"),
        ("/api/chat", "{", "Invalid JSON body: EOF while parsing an object at line 1 column 1"),
        ("/api/chat", '{"messages": []}', "model is required"),
    ):
        response = httpx.post(router.url + path, content=body, timeout=30)
        assert (response.status_code, response.json()) == (400, {"error": error}), body
    assert entries(router)["audio"]["status"]["value"] == "unloaded"


def test_a_path_no_model_answers_is_llama_servers_404_and_loads_nothing(router: Running) -> None:
    for method, path in (("GET", "/favicon.ico"), ("POST", "/nope?model=vision"), ("GET", "/v1/nope?model=vision")):
        response = httpx.request(method, router.url + path, json={"model": "vision"}, timeout=30)
        not_found = {"code": 404, "message": f"File Not Found: {path.partition('?')[0]}", "type": "not_found_error"}
        assert (response.status_code, response.json()) == (404, {"error": not_found})
    wrong_method = httpx.get(router.url + "/v1/chat/completions?model=vision", timeout=30)
    refused = {"code": 405, "message": "Method Not Allowed", "type": "invalid_request_error"}
    assert (wrong_method.status_code, wrong_method.json()) == (405, {"error": refused})
    unnamed = httpx.post(router.url + "/v1/chat/completions", json={"messages": []}, timeout=30)
    missing = {"code": 400, "message": "model name is missing from the request", "type": "invalid_request_error"}
    assert (unnamed.status_code, unnamed.json()) == (400, {"error": missing})
    assert entries(router)["vision"]["status"]["value"] == "unloaded"


def test_the_tools_and_the_cors_proxy_are_llama_servers_disabled_features(router: Running) -> None:
    disabled = {"error": {"message": "this feature is disabled", "type": "feature_disabled"}}
    for method, path in (("GET", "/tools"), ("POST", "/tools"), ("GET", "/cors-proxy"), ("POST", "/cors-proxy")):
        response = httpx.request(method, router.url + path + "?model=vision", json={"model": "vision"}, timeout=30)
        assert (response.status_code, response.json()) == (403, disabled), (method, path)
    assert entries(router)["vision"]["status"]["value"] == "unloaded"


def test_autoload_is_true_or_1_exactly_and_an_empty_one_is_the_routers_default(router: Running) -> None:
    body = {"model": "text", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for value in ("TRUE", "yes", "0"):
        refused = httpx.post(router.url + f"/v1/chat/completions?autoload={value}", json=body, timeout=30)
        not_loaded = {"code": 400, "message": "model is not loaded", "type": "invalid_request_error"}
        assert (refused.status_code, refused.json()) == (400, {"error": not_loaded}), value
    assert httpx.post(router.url + "/v1/chat/completions?autoload=", json=body, timeout=120).status_code == 200


def test_every_route_of_a_single_server_is_one_the_router_answers(router: Running) -> None:
    """No model is named: each route is either the router's own or a model's (400, model name missing), never
    the 404 or 405 of a path the router does not know."""
    routes = set(_methods_and_paths(create_app(Settings(), lambda: pytest.fail("not loaded")).routes))
    assert len(routes) > 40
    unknown = []
    for method, path in sorted(routes):
        url = router.url + path.replace("{id_slot}", "0").replace("{route:path}", "tags")
        response = httpx.request(method, url, headers={"Accept": "application/json"}, timeout=30)
        if response.status_code == 405 or "File Not Found" in response.text:
            unknown.append((method, path, response.status_code))
    assert unknown == []


def _methods_and_paths(routes: Iterable[object]) -> Iterator[tuple[str, str]]:
    """Each API route's methods and path, looking inside the routers FastAPI wraps when it includes them."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _methods_and_paths(included.routes)
        elif isinstance(route, APIRoute):
            yield from ((method, route.path) for method in route.methods)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_broken_cache_folder_is_named_in_a_warning_and_the_rest_listed(
    cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="lfmserve.router.catalog"):
        assert scan_cache() == []  # no cache yet: nothing to say
        assert caplog.messages == []
        cache.write_text("not a folder")
        assert scan_cache() == []
        assert caplog.messages == [
            f"the Hugging Face cache {cache} cannot be read, so none of its models are listed: Scan cache expects a "
            f"directory but found a file: {cache}. Please use `cache_dir` argument or set `HF_HUB_CACHE` environment "
            "variable."
        ]
        caplog.clear()
        cache.unlink()
        kept = _cache_model(cache, "org/kept-GGUF", "kept-Q8_0.gguf")
        (cache / "models--org--broken-GGUF").mkdir()  # a download cut short: no snapshots folder
        flags = {"hf-repo": "org/kept-GGUF:Q8_0", "offline": "true"}
        assert scan_cache() == [("org/kept-GGUF:Q8_0", flags, None, (str(kept),))]
        snapshots = cache / "models--org--broken-GGUF" / "snapshots"
        assert caplog.messages == [
            f"a Hugging Face cache folder is left out of the models: Snapshots dir doesn't exist in cached repo: "
            f"{snapshots}"
        ]


def test_a_bad_router_key_in_a_preset_stops_the_router_naming_its_section(tmp_path: Path, cache: Path) -> None:
    preset = tmp_path / "preset.ini"
    refusals = []
    for sections in (
        "[m]\nmodel = x.gguf\nttl = inf\n",
        "[m]\nmodel = x.gguf\nttl = nan\n",
        "[m]\nmodel = x.gguf\nttl = -5\n",
        "[m]\nmodel = x.gguf\nstop-timeout = 1e400\n",
        "[m]\nmodel = x.gguf\nstop-timeout = soon\n",
        "[m]\nmodel = x.gguf\nload-on-startup = maybe\n",
        "[m]\nmodel = x.gguf\ndedup-cache-models = 2\n",
        "[*]\ndedup-cache-models = perhaps\n\n[m]\nmodel = x.gguf\n",
    ):
        preset.write_text(sections)
        with pytest.raises(LfmError) as refused:
            build_catalog(Settings.from_argv(["--models-preset", str(preset)]))
        refusals.append(refused.value.message)
    assert refusals == [
        "preset 'm': ttl = 'inf' is not a number of seconds, 0 or more",
        "preset 'm': ttl = 'nan' is not a number of seconds, 0 or more",
        "preset 'm': ttl = '-5' is not a number of seconds, 0 or more",
        "preset 'm': stop-timeout = '1e400' is not a number of seconds, 0 or more",
        "preset 'm': stop-timeout = 'soon' is not a number",
        "preset 'm': load-on-startup = 'maybe': not true or false",
        "preset 'm': dedup-cache-models = '2': not true or false",
        "preset '*': dedup-cache-models = 'perhaps': not true or false",
    ]
    preset.write_text("[*]\ndedup-cache-models = off\n\n[m]\nmodel = x.gguf\nttl = 0\nstop-timeout = 2.5\n")
    spec = build_catalog(Settings.from_argv(["--models-preset", str(preset)]))["m"]
    assert (spec.ttl_s, spec.stop_timeout_s) == (0.0, 2.5)
