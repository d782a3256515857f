"""``--agent``'s CORS proxy over real HTTP: a request passed on to the URL named, with only the headers meant for it,
and the target's answer passed back as it came (a 204 with no body too); URLs llama-server's proxy refuses are
refused with its messages, as 400s."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from lfmserve.settings import Settings
from tests.conftest import ServerThread


@pytest.fixture(scope="module")
def server(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    return server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1, agent=True))


class _Target(BaseHTTPRequestHandler):
    """Answers a POST with 204 and no body, and a GET with the headers it received, as JSON."""

    def do_POST(self) -> None:
        self.send_response(204)
        self.end_headers()

    def do_GET(self) -> None:
        body = json.dumps({name.lower(): value for name, value in self.headers.items()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "session=target")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    http = ThreadingHTTPServer(("127.0.0.1", 0), _Target)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{http.server_port}"
    http.shutdown()
    http.server_close()


def test_the_proxy_passes_the_request_on_and_the_answer_back(server: ServerThread, target: str) -> None:
    models = httpx.get(server.url + "/cors-proxy", params={"url": server.url + "/models"}, timeout=30)
    assert models.status_code == 200 and models.json()["data"][0]["id"]
    headers = {"x-llama-server-proxy-header-X-Api": "1", "Authorization": "Bearer mine", "Cookie": "c=1"}
    echoed = httpx.get(server.url + "/cors-proxy", params={"url": target + "/echo"}, headers=headers, timeout=30)
    assert echoed.headers["content-type"] == "application/json" and "set-cookie" not in echoed.headers
    received = echoed.json()
    assert received["x-api"] == "1" and "authorization" not in received and "cookie" not in received
    empty = httpx.post(server.url + "/cors-proxy", params={"url": target}, json={}, timeout=30)
    assert (empty.status_code, empty.content) == (204, b"")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("/models", "invalid target URL: missing host"),
        ("ftp://127.0.0.1/x", "unsupported URL scheme in target URL: ftp"),
        ("http://user:pw@127.0.0.1/", "authentication in target URL is not supported"),
        ("http://127.0.0.1:9/", "the proxy could not reach http://127.0.0.1:9/: "),
    ],
)
def test_a_url_the_proxy_will_not_fetch_is_a_400_naming_why(server: ServerThread, url: str, message: str) -> None:
    response = httpx.get(server.url + "/cors-proxy", params={"url": url}, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["message"].startswith(message)


def test_agent_enables_every_tool_and_local_pages_only(server: ServerThread) -> None:
    assert len(httpx.get(server.url + "/tools").json()) == 7
    foreign = httpx.options(
        server.url + "/cors-proxy", headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "GET"}
    )
    assert "access-control-allow-origin" not in foreign.headers
