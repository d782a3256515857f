"""Every error a client can cause reaches it as the API's JSON error body, and disturbs nobody else."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.api.app import create_app
from lfmserve.loading.loader import load_serving
from lfmserve.settings import Settings
from tests.conftest import SEED_CHAT, ServerThread, post, wait_until_async

CHAT = "/v1/chat/completions"
#: (case, route, body, error type, the field named in ``param``)
INVALID_REQUESTS: list[tuple[str, str, Any, str, str | None]] = [
    ("malformed JSON", CHAT, b'{"messages": [', "invalid_request_error", None),
    ("body not an object", CHAT, b"[1, 2]", "invalid_request_error", None),
    ("missing messages", CHAT, {"temperature": 0.1}, "invalid_request_error", "messages"),
    ("empty messages", CHAT, {"messages": []}, "invalid_request_error", "messages"),
    (
        "unknown role",
        CHAT,
        {"messages": [{"role": "wizard", "content": "x"}]},
        "invalid_request_error",
        "messages.0.role",
    ),
    (
        "content wrong type",
        CHAT,
        {"messages": [{"role": "user", "content": 5}]},
        "invalid_request_error",
        "messages.0.content",
    ),
    ("user without content", CHAT, {"messages": [{"role": "user"}]}, "invalid_request_error", "messages.0"),
    ("temperature a string", CHAT, {**SEED_CHAT, "temperature": "hot"}, "invalid_request_error", "temperature"),
    ("negative temperature", CHAT, {**SEED_CHAT, "temperature": -1}, "invalid_request_error", "temperature"),
    ("top_p above 1", CHAT, {**SEED_CHAT, "top_p": 1.5}, "invalid_request_error", "top_p"),
    ("min_p negative", CHAT, {**SEED_CHAT, "min_p": -0.1}, "invalid_request_error", "min_p"),
    ("top_k a float", CHAT, {**SEED_CHAT, "top_k": 2.5}, "invalid_request_error", "top_k"),
    ("max_tokens below -1", CHAT, {**SEED_CHAT, "max_tokens": -5}, "invalid_request_error", "max_tokens"),
    ("stream not a bool", CHAT, {**SEED_CHAT, "stream": "yes"}, "invalid_request_error", "stream"),
    ("stop wrong type", CHAT, {**SEED_CHAT, "stop": 7}, "invalid_request_error", "stop"),
    ("n above the slots", CHAT, {**SEED_CHAT, "n": 99}, "invalid_request_error", "n"),
    (
        "presence penalty out of range",
        CHAT,
        {**SEED_CHAT, "presence_penalty": 3},
        "invalid_request_error",
        "presence_penalty",
    ),
    (
        "logit bias token out of vocab",
        CHAT,
        {**SEED_CHAT, "logit_bias": {"99999": 1}},
        "invalid_request_error",
        "logit_bias",
    ),
    ("logit bias not pairs", CHAT, {**SEED_CHAT, "logit_bias": [[1, 2, 3]]}, "invalid_request_error", "logit_bias"),
    ("id_slot beyond the slots", CHAT, {**SEED_CHAT, "id_slot": 17}, "invalid_request_error", "id_slot"),
    (
        "image without a projector",
        CHAT,
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]},
        "invalid_request_error",
        "messages.0.content.0",
    ),
    (
        "bad tool call arguments",
        CHAT,
        {
            "messages": [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{"}}],
                },
            ]
        },
        "invalid_request_error",
        "messages",
    ),
    (
        "prompt too long",
        CHAT,
        {"messages": [{"role": "user", "content": "word " * 3000}]},
        "exceed_context_size_error",
        None,
    ),
    # found by fuzzing: values llama.cpp's C types cannot hold, biases that are not numbers, odd schemas, bad history
    ("top_k beyond int32", CHAT, {**SEED_CHAT, "top_k": 2**64}, "invalid_request_error", "top_k"),
    (
        "repeat_last_n beyond int32",
        CHAT,
        {**SEED_CHAT, "repeat_last_n": 2**64},
        "invalid_request_error",
        "repeat_last_n",
    ),
    ("logit bias a string", CHAT, {**SEED_CHAT, "logit_bias": [[5, "abc"]]}, "invalid_request_error", "logit_bias"),
    ("logit bias true", CHAT, {**SEED_CHAT, "logit_bias": [[5, True]]}, "invalid_request_error", "logit_bias"),
    (
        "logit bias infinite",
        CHAT,
        b'{"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": 1e999}}',
        "invalid_request_error",
        "logit_bias",
    ),
    ("logit bias too large", CHAT, {**SEED_CHAT, "logit_bias": [[5, 10**400]]}, "invalid_request_error", "logit_bias"),
    ("logit bias token true", CHAT, {**SEED_CHAT, "logit_bias": [[True, 1]]}, "invalid_request_error", "logit_bias"),
    ("json schema false", CHAT, {**SEED_CHAT, "json_schema": False}, "invalid_request_error", "json_schema"),
    (
        "json schema with NaN",
        "/completion",
        b'{"prompt": "x", "json_schema": {"type": "number", "maximum": NaN}}',
        "invalid_request_error",
        "json_schema",
    ),
    (
        "response format schema with infinity",
        CHAT,
        b'{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",'
        b' "json_schema": {"name": "x", "schema": {"type": "number", "minimum": -Infinity}}}}',
        "invalid_request_error",
        "response_format",
    ),
    (
        "history call without a function",
        CHAT,
        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{}]}]},
        "invalid_request_error",
        "messages.1.tool_calls.0.function",
    ),
    (
        "history call function not an object",
        CHAT,
        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"function": "f"}]}]},
        "invalid_request_error",
        "messages.1.tool_calls.0.function",
    ),
    (
        "history call name not a string",
        CHAT,
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"function": {"name": 5}}]},
            ]
        },
        "invalid_request_error",
        "messages.1.tool_calls.0.function.name",
    ),
    (
        "history call arguments a number",
        CHAT,
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 5}}]},
            ]
        },
        "invalid_request_error",
        "messages.1.tool_calls.0.function.arguments",
    ),
    (
        "history call arguments not an object",
        CHAT,
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]},
            ]
        },
        "invalid_request_error",
        "messages",
    ),
    ("completion without prompt", "/completion", {"n_predict": 3}, "invalid_request_error", "prompt"),
    ("completion prompt token out of vocab", "/completion", {"prompt": [1, 70000]}, "invalid_request_error", "prompt"),
    ("two prompts streamed", "/completion", {"prompt": ["a", "b"], "stream": True}, "invalid_request_error", "prompt"),
    ("tokenize content not a string", "/tokenize", {"content": 12}, "invalid_request_error", "content"),
    ("detokenize unknown token", "/detokenize", {"tokens": [1, 123456]}, "invalid_request_error", "tokens"),
]


def _send(server: ServerThread, path: str, body: Any) -> httpx.Response:
    if isinstance(body, bytes):
        return httpx.post(server.url + path, content=body, headers={"Content-Type": "application/json"}, timeout=60)
    return httpx.post(server.url + path, json=body, timeout=60)


@pytest.mark.parametrize(
    ("name", "path", "body", "error_type", "param"), INVALID_REQUESTS, ids=[r[0] for r in INVALID_REQUESTS]
)
def test_invalid_input_is_a_400_naming_the_field(
    tiny_server: ServerThread, name: str, path: str, body: Any, error_type: str, param: str | None
) -> None:
    response = _send(tiny_server, path, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["type"], error.get("param")) == (400, error_type, param)
    assert error["message"] and "Traceback" not in response.text
    if error_type == "exceed_context_size_error":
        assert error["n_ctx"] == 512 and error["n_prompt_tokens"] > 2048
        assert error["message"] == (
            f"request ({error['n_prompt_tokens']} tokens) exceeds the available context size (512 tokens), "
            "try increasing it"
        )


def test_llama_servers_ban_form_and_an_any_value_schema_work(tiny_server: ServerThread) -> None:
    banned = post(tiny_server, "/completion", {"prompt": "x", "n_predict": 4, "logit_bias": [[100, False]]}).json()
    assert banned["generation_settings"]["logit_bias"] == [{"bias": None, "token": 100}]
    for seed in range(4):  # ``true`` accepts any JSON value: the grammar ends once one is complete
        anything = post(tiny_server, "/completion", {"prompt": "x", "n_predict": 60, "json_schema": True, "seed": seed})
        assert anything.json()["stop_type"] == "eos"
        json.loads(anything.json()["content"])


def test_the_messages_name_the_field_and_the_value(tiny_server: ServerThread) -> None:
    cases = {
        "temperature": (
            {**SEED_CHAT, "temperature": "hot"},
            "Invalid value for 'temperature': Input should be a valid number (got 'hot')",
        ),
        "messages": ({"temperature": 0.1}, "Missing required field 'messages'"),
        "id_slot": ({**SEED_CHAT, "id_slot": 17}, "id_slot 17 does not exist (there are 4 slots)"),
    }
    for body, message in cases.values():
        assert post(tiny_server, CHAT, body).json()["error"]["message"] == message


def test_a_failing_template_answers_400_with_its_message(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    template = tmp_path_factory.mktemp("tpl") / "strict.jinja"
    template.write_text(
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations must start "
        "with a user message') }}{% endif %}{{ messages[0]['content'] }}"
    )
    server = server_factory(
        Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, chat_template_file=str(template))
    )
    response = post(server, CHAT, {"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}]})
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": 400,
        "message": "Chat template error: Conversations must start with a user message",
        "type": "invalid_request_error",
    }
    assert post(server, "/apply-template", {"messages": [{"role": "user", "content": "ok"}]}).json() == {"prompt": "ok"}


def test_an_unknown_route_is_404_and_a_wrong_method_405(tiny_server: ServerThread) -> None:
    response = httpx.get(tiny_server.url + "/v1/nothing")
    assert response.status_code == 404
    assert response.json() == {
        "error": {"code": 404, "message": "File Not Found: /v1/nothing", "type": "not_found_error"}
    }
    response = httpx.get(tiny_server.url + CHAT)
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert response.json() == {"error": {"code": 405, "message": "Method Not Allowed", "type": "invalid_request_error"}}


def test_the_tools_and_the_cors_proxy_are_off_as_llama_servers_are_without_their_flags(
    tiny_server: ServerThread,
) -> None:
    disabled = {"error": {"message": "this feature is disabled", "type": "feature_disabled"}}
    for method, path in (("GET", "/tools"), ("POST", "/tools"), ("GET", "/cors-proxy?url=http://127.0.0.1:9/")):
        response = httpx.request(method, tiny_server.url + path, json={"tool": "read_file"})
        assert (response.status_code, response.json()) == (403, disabled), (method, path)


@pytest.mark.parametrize(
    ("method", "path", "param", "message"),
    [
        (
            "GET",
            "/slots?fail_on_no_slot=maybe",
            "fail_on_no_slot",
            "Input should be a valid boolean, unable to interpret input",
        ),
        (
            "POST",
            "/slots/abc?action=erase",
            "id_slot",
            "Input should be a valid integer, unable to parse string as an integer",
        ),
    ],
)
def test_bad_query_and_path_values_are_400_not_fastapis_422(
    tiny_server: ServerThread, method: str, path: str, param: str, message: str
) -> None:
    response = httpx.request(method, tiny_server.url + path)
    assert response.status_code == 400
    value = path.split("=")[1] if "?fail" in path else "abc"
    assert response.json() == {
        "error": {
            "code": 400,
            "message": f"Invalid value for '{param}': {message} (got {value!r})",
            "type": "invalid_request_error",
            "param": param,
        }
    }


def test_bad_requests_do_not_disturb_requests_in_flight(tiny_server: ServerThread) -> None:
    good = {**SEED_CHAT, "temperature": 0, "max_tokens": 40}
    expected = post(tiny_server, CHAT, good).json()["choices"][0]["message"]["content"]
    results: list[str] = []

    def client() -> None:
        results.append(post(tiny_server, CHAT, good).json()["choices"][0]["message"]["content"])

    threads = [threading.Thread(target=client) for _ in range(3)]
    for t in threads:
        t.start()
    for _, path, body, _, _ in INVALID_REQUESTS:
        assert _send(tiny_server, path, body).status_code == 400
    for t in threads:
        t.join(timeout=60)
    assert results == [expected] * 3


def test_a_request_whose_client_has_gone_writes_nothing(tiny_gguf: Path) -> None:
    """At the ASGI level: a whole-answer chat whose client disconnects sends no response at all."""
    settings = Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1)
    app = create_app(settings, lambda: load_serving(settings, str(tiny_gguf)))

    async def main() -> tuple[list[dict[str, Any]], int]:
        lifespan_inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        lifespan_outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        state: dict[str, Any] = {}
        lifespan = asyncio.create_task(
            app(
                {"type": "lifespan", "asgi": {"version": "3.0"}, "state": state},
                lifespan_inbox.get,
                lifespan_outbox.put,
            )
        )
        await lifespan_inbox.put({"type": "lifespan.startup"})
        assert (await lifespan_outbox.get())["type"] == "lifespan.startup.complete"
        while state["app_state"].serving is None:
            await asyncio.sleep(0.02)
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 400, "ignore_eos": True}
        # The client leaves right after sending: the answer is still being generated.
        messages = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]

        async def receive() -> dict[str, Any]:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "path": CHAT,
            "raw_path": CHAT.encode(),
            "query_string": b"",
            "headers": [(b"content-type", b"application/json")],
            "state": dict(state),
        }
        await app(scope, receive, send)
        engine = state["app_state"].serving.engine
        await wait_until_async(
            lambda: engine.stats.n_requests == 1 and not engine.busy, "the request reaches the engine, then its cancel"
        )
        busy = sum(slot.busy for slot in engine.slots)
        await lifespan_inbox.put({"type": "lifespan.shutdown"})
        await lifespan
        return sent, busy

    sent, busy = asyncio.run(main())
    assert sent == [] and busy == 0


def test_an_unexpected_error_is_a_500_in_the_error_shape_and_the_connection_stays_usable(
    tiny_gguf: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1)
    app = create_app(settings, lambda: load_serving(settings, str(tiny_gguf)))

    async def broken() -> None:
        raise RuntimeError("a bug with a secret in its message")

    app.add_api_route("/broken", broken)
    server = ServerThread(app).start()
    try:
        server.wait_ready()
        connection = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=30)
        with caplog.at_level(logging.ERROR):
            connection.request("GET", "/broken")
            response = connection.getresponse()
            body = json.loads(response.read())
        assert (response.status, response.getheader("connection")) == (500, None)
        assert body == {
            "error": {"code": 500, "message": "Internal server error: RuntimeError", "type": "server_error"}
        }
        tracebacks = [r for r in caplog.records if r.exc_info]
        assert [r.getMessage() for r in tracebacks] == ["unexpected error in GET /broken"]  # logged once
        assert "secret" not in json.dumps(body)
        connection.request("GET", "/health")  # the same keep-alive connection still serves
        assert (connection.getresponse().status, connection.sock is not None) == (200, True)
        connection.close()
    finally:
        server.stop()
