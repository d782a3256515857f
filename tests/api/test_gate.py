"""The gate in front of every route: API keys (Bearer or X-Api-Key), public routes, constant-time comparison."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest
from fastapi import FastAPI, Request
from starlette.datastructures import Headers
from starlette.testclient import TestClient

from lfmserve.api.edge import add_edge
from lfmserve.api.gate import key_ok
from lfmserve.api.state import AppState
from lfmserve.errors import Unavailable
from lfmserve.settings import Settings
from tests.conftest import GREEDY, ServerThread, post


def test_api_keys(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    server = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, api_key=("k1", "k2")))
    chat = {"messages": [{"role": "user", "content": "Hi"}], **GREEDY}
    for headers in ({}, {"Authorization": "Bearer nope"}, {"X-Api-Key": "k3"}):
        response = post(server, "/v1/chat/completions", chat, headers=headers)
        assert response.status_code == 401
        assert response.json()["error"] == {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}
    assert post(server, "/v1/chat/completions", chat, headers={"Authorization": "Bearer k2"}).status_code == 200
    assert post(server, "/v1/chat/completions", chat, headers={"X-Api-Key": "k1"}).status_code == 200
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k1")
    assert client.chat.completions.create(model="m", messages=chat["messages"], max_tokens=2).usage is not None
    # llama-server's public set (its health routes and the web UI's files), and Ollama's version probe; reading
    # only: the same paths with another method need the key, as does every listing of the models.
    public = [("GET", "/health"), ("GET", "/v1/health"), ("GET", "/api/version"), ("GET", "/"), ("HEAD", "/")]
    keyed = [("GET", "/v1/models"), ("GET", "/models"), ("GET", "/api/tags"), ("GET", "/props"), ("POST", "/health")]
    keyed += [("DELETE", "/api/version"), ("POST", "/")]
    assert [httpx.request(method, server.url + path).status_code for method, path in public] == [200] * 5
    assert [httpx.request(method, server.url + path).status_code for method, path in keyed] == [401] * 7
    assert httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer k2"}).status_code == 200


def test_a_key_is_read_from_bearer_or_x_api_key() -> None:
    keys = (b"k1", b"k2")
    assert key_ok(Headers({"authorization": "Bearer k2"}), keys)
    assert key_ok(Headers({"authorization": "bearer  k1 "}), keys)  # the scheme is case-insensitive
    assert key_ok(Headers({"x-api-key": "k1"}), keys)
    assert not key_ok(Headers({"authorization": "Basic k1"}), keys)  # not a bearer token, and no x-api-key
    assert not key_ok(Headers({"authorization": "Bearer k3", "x-api-key": "k1"}), keys)  # bearer wins
    assert not key_ok(Headers({}), keys)


def test_a_body_over_the_limit_is_413_before_it_is_read(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path
) -> None:
    server = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, max_body_bytes=1000))
    expected = {
        "error": {
            "code": 413,
            "message": "request body larger than 1000 bytes (the server's --max-body-bytes)",
            "type": "invalid_request_error",
        }
    }
    big = {"messages": [{"role": "user", "content": "x" * 2000}]}
    declared = post(server, "/v1/chat/completions", big)  # refused from its Content-Length
    assert (declared.status_code, declared.json()) == (413, expected)

    def chunks() -> Iterator[bytes]:  # no Content-Length: refused once the limit is passed
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"x" * 100
        yield b'"}]}'

    streamed = httpx.post(server.url + "/v1/chat/completions", content=chunks(), timeout=60)
    assert (streamed.status_code, streamed.json()) == (413, expected)
    small = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1})
    assert small.status_code == 200


def _edge_app(**edge: Callable[[], Unavailable | None]) -> TestClient:
    """An app of two routes behind :func:`add_edge`: one key, a 16-byte body limit."""
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/echo")
    @app.post("/api/echo")
    async def echo(request: Request) -> dict[str, int]:
        return {"n_bytes": len(await request.body())}

    add_edge(app, Settings.of(api_key=("k1",), max_body_bytes=16, ui=False), **edge)
    return TestClient(app)


def test_the_routers_gate_checks_keys_and_bodies_in_each_familys_shape() -> None:
    client = _edge_app()  # as the router adds it: no 503s of its own
    key = {"Authorization": "Bearer k1"}
    assert (client.post("/echo").status_code, client.post("/echo").json()) == (
        401,
        {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}},
    )
    assert client.post("/api/echo").json() == {"error": "Invalid API Key"}  # Ollama's shape under /api/
    assert (client.get("/health").status_code, client.post("/echo", content=b"12", headers=key).json()) == (
        200,
        {"n_bytes": 2},
    )
    big = client.post("/echo", content=b"x" * 17, headers=key)
    assert (big.status_code, big.json()["error"]["message"]) == (
        413,
        "request body larger than 16 bytes (the server's --max-body-bytes)",
    )


def test_a_model_servers_gate_answers_503_first_even_on_public_routes() -> None:
    client = _edge_app(unavailable=lambda: Unavailable("Loading model"))
    for response in (client.get("/health"), client.post("/echo", headers={"X-Api-Key": "k1"})):
        assert (response.status_code, response.json()) == (
            503,
            {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}},
        )


@pytest.mark.parametrize(
    ("draining", "loaded", "sleeping", "load_error", "message"),
    [
        (False, False, False, None, "Loading model"),
        (False, False, False, OSError("no file"), "Model failed to load: no file"),
        (True, True, False, None, "the server is shutting down"),
        (False, False, True, None, None),  # asleep: the sleeper behind the gate wakes it
        (False, True, False, None, None),
    ],
)
def test_a_model_server_is_unavailable_while_loading_failed_or_draining(
    draining: bool, loaded: bool, sleeping: bool, load_error: BaseException | None, message: str | None
) -> None:
    state = AppState(Settings(), {}, draining=draining, sleeping=sleeping, load_error=load_error)
    state.serving = object() if loaded else None  # type: ignore[assignment]  # only its presence is read
    refusal = state.unavailable()
    assert (refusal.message if refusal else None) == message
