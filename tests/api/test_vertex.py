"""Vertex AI's prediction route: instances dispatched to the server's routes by ``@requestFormat``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from lfmserve.api.vertex import VertexRoutes, request_format
from lfmserve.settings import Settings
from tests.conftest import ServerThread, post


def test_request_formats_are_the_paths_camel_cased() -> None:
    assert request_format("/v1/chat/completions") == "chatCompletions"
    assert request_format("/apply-template") == "applyTemplate"
    assert request_format("/chat/completions/input_tokens") == "chatCompletionsInputTokens"
    assert request_format("/slots/{id_slot}") == "slots"


def test_the_routes_come_from_aip_variables() -> None:
    assert VertexRoutes.from_environ({}) is None
    assert VertexRoutes.from_environ({"AIP_MODE": "PREDICTION"}) == VertexRoutes("/predict", None)
    environ = {"AIP_MODE": "PREDICTION", "AIP_PREDICT_ROUTE": "v1/predict", "AIP_HEALTH_ROUTE": "/ping"}
    assert VertexRoutes.from_environ(environ) == VertexRoutes("/v1/predict", "/ping")


@pytest.fixture(scope="module")
def vertex_server(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AIP_MODE", "PREDICTION")
        env.setenv("AIP_HEALTH_ROUTE", "ping")
        return server_factory(Settings.of(model=str(tiny_gguf), ctx_size=1024, parallel=2))


def test_instances_run_through_their_routes_in_order(vertex_server: ServerThread) -> None:
    chat = {"max_tokens": 4, "temperature": 0, "messages": [{"role": "user", "content": "Hi"}]}
    instances = [
        {"@requestFormat": "chatCompletions", **chat, "stream": True},  # streaming is turned off
        {"@requestFormat": "/tokenize", "content": "Hello"},
        {"@requestFormat": "applyTemplate", "messages": chat["messages"]},
        {"@requestFormat": "nope"},
        {"max_tokens": 1},
        {"@requestFormat": "chatCompletions", "messages": []},
    ]
    response = post(vertex_server, "/predict", {"instances": instances})
    assert response.status_code == 200
    chat_answer, tokens, template, unknown, unnamed, invalid = response.json()["predictions"]
    assert chat_answer["object"] == "chat.completion" and chat_answer["usage"]["completion_tokens"] == 4
    assert tokens == post(vertex_server, "/tokenize", {"content": "Hello"}).json()
    assert template["prompt"].endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert unknown["error"]["message"] == "no handler registered for @requestFormat: nope"
    assert unnamed["error"]["message"] == "each instance must include a string @requestFormat"
    assert invalid["error"]["code"] == 400 and invalid["error"]["type"] == "invalid_request_error"


def test_a_body_without_instances_is_a_400_and_the_health_route_answers(vertex_server: ServerThread) -> None:
    response = post(vertex_server, "/predict", {"inputs": []})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "request body must include an array field named instances"
    assert httpx.get(vertex_server.url + "/ping").json() == {"status": "ok"}
