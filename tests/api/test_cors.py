"""CORS as llama-server answers it: which origin is allowed under each ``--cors-origins``, the preflight's exact
answer (before the loading check and the API key), and the origin header on every other response."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from lfmserve.api.cors import Cors
from lfmserve.chat.serving import Serving
from lfmserve.loading.loader import load_serving
from lfmserve.settings import ServerSettings, Settings
from tests.conftest import ServerThread, serve

PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "Authorization"}


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError("not called")


@pytest.mark.parametrize(
    ("origins", "origin", "allowed"),
    [
        ("*", "https://web.mydomain.fr", "https://web.mydomain.fr"),  # echoed: credentials are allowed
        ("*", "", None),
        ("localhost", "http://localhost", "http://localhost"),
        ("localhost", "http://localhost:8080", "http://localhost:8080"),
        ("localhost", "http://127.0.0.1:3000", "http://127.0.0.1:3000"),
        ("localhost", "http://[::1]:3000", "http://[::1]:3000"),
        ("localhost", "http://localhost.evil.com", None),
        ("localhost", "http://notlocalhost", None),
        ("localhost", "localhost", None),  # not a URL
        ("localhost", "http://[::1", None),
        ("https://a.example, https://b.example", "https://b.example", "https://b.example"),
        ("https://a.example,https://b.example", "https://c.example", None),
        # an entry with * is a pattern, * among others any origin (OLLAMA_ORIGINS's forms)
        ("https://a.example,http://localhost:*", "http://localhost:3000", "http://localhost:3000"),
        ("https://a.example,http://localhost:*", "http://localhost", None),
        ("https://a.example,http://localhost:*", "http://localhost.evil.com", None),
        ("chrome-extension://*", "chrome-extension://abcdef", "chrome-extension://abcdef"),
        ("https://*.example.com", "https://app.example.com", "https://app.example.com"),
        ("https://*.example.com", "https://example.com", None),
        ("https://*.example.com", "https://app.example.com.evil", None),
        ("https://a.example,*", "https://c.example", "https://c.example"),
        ("https://a.example.,http://a.example", "https://a-example", None),  # a dot is a dot
    ],
)
def test_the_allowed_origin_under_each_policy(origins: str, origin: str, allowed: str | None) -> None:
    assert Cors(_app, ServerSettings(cors_origins=origins), origins).allowed_origin(origin) == allowed


@pytest.fixture(scope="module")
def keyed_server(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    return server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1, api_key=("k1",)))


def test_a_preflight_is_answered_without_a_key_with_llama_servers_headers(keyed_server: ServerThread) -> None:
    response = httpx.options(keyed_server.url + "/completions", headers={"Origin": "web.mydomain.fr", **PREFLIGHT})
    assert (response.status_code, response.content) == (200, b"")
    assert dict(response.headers) == {
        "access-control-allow-origin": "web.mydomain.fr",
        "vary": "Origin",
        "access-control-allow-credentials": "true",
        "access-control-allow-methods": "GET, POST, DELETE, OPTIONS",
        "access-control-allow-headers": "*",
        "content-type": "text/html; charset=utf-8",
        "content-length": "0",
        "date": response.headers["date"],
        "server": "uvicorn",
    }


def test_every_response_carries_the_origin_errors_too(keyed_server: ServerThread) -> None:
    origin = {"Origin": "http://localhost:5173"}
    refused = httpx.get(keyed_server.url + "/props", headers=origin)
    assert refused.status_code == 401
    assert (refused.headers["access-control-allow-origin"], refused.headers["vary"]) == (
        "http://localhost:5173",
        "Origin",
    )
    answered = httpx.get(keyed_server.url + "/props", headers={**origin, "Authorization": "Bearer k1"})
    assert answered.status_code == 200 and answered.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "access-control-allow-credentials" not in answered.headers  # only a preflight says it
    plain = httpx.get(keyed_server.url + "/health")
    assert "access-control-allow-origin" not in plain.headers and "vary" not in plain.headers  # no Origin, no CORS


def test_localhost_reflects_local_pages_only(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    server = server_factory(
        Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1, cors_origins="localhost")
    )
    local = httpx.options(server.url + "/completions", headers={"Origin": "http://[::1]:3000", **PREFLIGHT})
    assert local.headers["access-control-allow-origin"] == "http://[::1]:3000"
    for origin in ("http://evil.com", "http://localhost.evil.com"):
        refused = httpx.options(server.url + "/completions", headers={"Origin": origin, **PREFLIGHT})
        assert refused.status_code == 200  # answered, without the header: the browser refuses the call
        assert "access-control-allow-origin" not in refused.headers
        assert refused.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
        get = httpx.get(server.url + "/health", headers={"Origin": origin})
        assert get.status_code == 200 and "access-control-allow-origin" not in get.headers


@pytest.fixture
def loading_server(tiny_gguf: Path) -> Iterator[tuple[ServerThread, threading.Event]]:
    """A server whose model load waits until the event is set."""
    release = threading.Event()
    settings = Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1)

    def load() -> Serving:
        release.wait(30)
        return load_serving(settings, str(tiny_gguf))

    server = serve(settings, load)
    yield server, release
    release.set()
    server.stop()


def test_a_preflight_is_answered_while_the_model_loads(loading_server: tuple[ServerThread, threading.Event]) -> None:
    server, release = loading_server
    loading = httpx.get(server.url + "/health", headers={"Origin": "http://localhost"})
    assert loading.status_code == 503 and loading.headers["access-control-allow-origin"] == "http://localhost"
    preflight = httpx.options(server.url + "/v1/chat/completions", headers={"Origin": "http://localhost", **PREFLIGHT})
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "http://localhost"
    release.set()
    server.wait_ready()
