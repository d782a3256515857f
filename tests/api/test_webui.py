"""The web UI's files at ``/``: public like llama-server's, gzipped, revalidated, and gone with ``--no-ui``; every
API route stays behind the key. (That they are served while the model loads is in test_app.py.)"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest

from lfmserve.api.app import create_app
from lfmserve.api.webui import CONTENT_SECURITY_POLICY, STATIC_DIR, load_assets
from lfmserve.settings import Settings
from tests.conftest import ServerThread, route_paths

#: The paths llama.cpp's test_security.py asks for without a key.
LLAMA_SERVER_UI_PATHS = ("/", "/sw.js", "/manifest.webmanifest", "/_app/version.json")


@pytest.fixture(scope="module")
def keyed(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    server: ServerThread = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, api_key=("k",)))
    return server


def test_the_page_and_llama_servers_ui_paths_need_no_key_and_the_api_still_does(keyed: ServerThread) -> None:
    page = httpx.get(keyed.url + "/", headers={"Accept": "text/html,application/xhtml+xml"})
    assert page.status_code == 200 and "<!doctype html>" in page.text
    assert "<!doctype html>" in httpx.get(keyed.url + "/").text  # curl, requests: */*, as llama-server's tests
    ollama_probe = httpx.get(keyed.url + "/", headers={"Accept": "application/json"})  # what Ollama's clients send
    assert ollama_probe.text == "Ollama is running"
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    for path in LLAMA_SERVER_UI_PATHS + ("/index.html", "/app.js", "/vendor/marked/LICENSE"):
        assert httpx.get(keyed.url + path).status_code == 200, path
    assert httpx.get(keyed.url + "/_app/version.json").json() == {"version": version("lfmserve")}
    assert json.loads(httpx.get(keyed.url + "/manifest.webmanifest").text)["start_url"] == "."
    for method, path in (("GET", "/props"), ("GET", "/slots"), ("POST", "/v1/chat/completions"), ("GET", "/nope")):
        assert httpx.request(method, keyed.url + path).status_code == 401, path
    assert httpx.post(keyed.url + "/", json={}).status_code == 401  # only reading the page or the probe is public
    assert httpx.post(keyed.url + "/", json={}, headers={"Authorization": "Bearer k"}).status_code == 405


def test_files_are_gzipped_when_the_browser_takes_it_and_revalidated_with_an_etag(keyed: ServerThread) -> None:
    raw = (STATIC_DIR / "app.js").read_bytes()
    plain = httpx.get(keyed.url + "/app.js", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.content == raw
    with httpx.stream("GET", keyed.url + "/app.js", headers={"Accept-Encoding": "gzip"}) as zipped:
        body = b"".join(zipped.iter_raw())
    assert zipped.headers["content-encoding"] == "gzip" and gzip.decompress(body) == raw
    assert len(body) < len(raw) / 2
    assert zipped.headers["vary"] == "Accept-Encoding" and zipped.headers["cache-control"] == "no-cache"
    again = httpx.get(keyed.url + "/app.js", headers={"If-None-Match": zipped.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    head = httpx.head(keyed.url + "/style.css")
    assert head.status_code == 200 and head.content == b"" and head.headers["content-type"].startswith("text/css")


def test_no_ui_answers_404_for_the_files_and_the_probe_at_the_root(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path
) -> None:
    server = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, ui=False))
    for path in LLAMA_SERVER_UI_PATHS[1:]:
        response = httpx.get(server.url + path)
        assert response.status_code == 404
        assert response.json()["error"]["message"] == f"File Not Found: {path}"
    for accept in ("text/html", "*/*"):  # llama-server's 404 to a browser, curl or requests
        page = httpx.get(server.url + "/", headers={"Accept": accept})
        assert (page.status_code, page.json()["error"]["message"]) == (404, "File Not Found: /")
    probe = httpx.get(server.url + "/", headers={"Accept": "application/json"})  # Ollama's clients still get theirs
    assert (probe.status_code, probe.text) == (200, "Ollama is running")


def test_no_file_but_the_page_shadows_an_api_route_and_all_of_them_gzip_under_300_kb() -> None:
    assets = load_assets()
    routes = set(route_paths(create_app(Settings(), lambda: pytest.fail("not loaded")).routes))
    assert {"/v1/chat/completions", "/health", "/slots"} <= routes
    assert set(assets) & routes == {"/"}  # browsers get the page, Ollama's clients the probe answer
    assert {"/", "/index.html", "/sw.js", "/manifest.webmanifest", "/_app/version.json"} <= set(assets)
    assert sum(len(asset.gzipped) for asset in assets.values()) < 300_000
