"""The gate in front of every route: API keys (Bearer or X-Api-Key), public routes, constant-time comparison."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
from starlette.datastructures import Headers

from lfmserve.api.gate import key_ok
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
