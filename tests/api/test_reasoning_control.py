"""``POST /v1/chat/completions/control`` over real HTTP: a streamed chat with ``reasoning_control: true`` has its
thinking ended by ``reasoning_end``, and what follows is token for token the answer of the same request with its
reasoning budget spent at that point. Gemma-3-270M decodes slowly enough here (tens of milliseconds a token) that
the control lands while the model still thinks; the template opens the thinking for it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.settings import Settings
from tests.api.test_reasoning_budget import ASK, TEMPLATE
from tests.conftest import ServerThread

CONTROL = "/v1/chat/completions/control"
#: Greedy, with each token's text reported, for the exact comparison.
GREEDY = {"temperature": 0, "top_k": 1, "logprobs": True}


@pytest.fixture(scope="module")
def server(
    server_factory: Callable[..., ServerThread], gemma_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> ServerThread:
    template = tmp_path_factory.mktemp("control") / "thinking.jinja"
    template.write_text(TEMPLATE)
    settings = Settings.of(
        model=str(gemma_gguf), ctx_size=1024, parallel=1, threads=1, chat_template_file=str(template)
    )
    return server_factory(settings)


def _stream(server: ServerThread, **fields: Any) -> Iterator[dict[str, Any]]:
    """The chunks of a streamed chat, as they come; leaving the loop closes the stream (the server cancels)."""
    body = {"messages": ASK, "max_tokens": 400, "stream": True, **GREEDY, **fields}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                yield json.loads(line[6:])


def _control(server: ServerThread, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + CONTROL, json=body, timeout=30)


def test_reasoning_end_ends_the_thinking_and_the_answer_is_the_one_of_a_budget_spent_there(
    server: ServerThread,
) -> None:
    tokens: list[str] = []
    reasoning, content, answer = "", "", None
    for chunk in _stream(server, reasoning_control=True):
        delta = chunk["choices"][0]["delta"]
        tokens += [entry["token"] for entry in (chunk["choices"][0].get("logprobs") or {}).get("content") or []]
        reasoning += delta.get("reasoning_content") or ""
        content += delta.get("content") or ""
        if reasoning and answer is None:
            answer = _control(server, {"id": chunk["id"], "action": "reasoning_end"})
        if len(content.split()) >= 3:
            break
    assert answer is not None and (answer.status_code, answer.json()) == (200, {"success": True})
    # The thinking tokens, then the end of the thinking written by force (its tokens start where its text does),
    # then the answer: the same tokens as a budget of that many thinking tokens gives.
    n_thinking = _tokens_before(tokens, "".join(tokens).index("</think>"))
    assert _tokens(server, len(tokens), reasoning_budget_tokens=n_thinking) == tokens
    assert 0 < n_thinking < len(tokens) and content
    assert "</think>" not in "".join(_tokens(server, len(tokens)))  # left alone, the model was still thinking


def _tokens(server: ServerThread, max_tokens: int, **fields: Any) -> list[str]:
    """The tokens of the whole (not streamed) greedy answer."""
    body = {"messages": ASK, "max_tokens": max_tokens, **GREEDY, **fields}
    answer = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120).json()
    return [entry["token"] for entry in answer["choices"][0]["logprobs"]["content"]]


def _tokens_before(tokens: list[str], n_chars: int) -> int:
    """How many of the tokens make up the first ``n_chars`` characters of their text."""
    length = 0
    for count, token in enumerate(tokens):
        if length == n_chars:
            return count
        length += len(token)
    raise AssertionError(f"no token starts at character {n_chars}")


def test_a_completion_not_armed_or_gone_or_unknown_is_a_failure_with_llama_servers_message(
    server: ServerThread,
) -> None:
    cid = None
    for chunk in _stream(server):
        cid = chunk["id"]
        assert _control(server, {"id": cid, "action": "reasoning_end"}).json() == {
            "success": False,
            "message": "reasoning control not enabled for this completion",
        }
        break
    assert cid is not None and cid.startswith("chatcmpl-")
    for gone in (cid, "chatcmpl-unknown"):
        assert _control_once_settled(server, {"id": gone, "action": "reasoning_end", "model": "m"}) == {
            "success": False,
            "message": "no active completion for this id",
        }


def _control_once_settled(server: ServerThread, body: dict[str, Any]) -> Any:
    """The control's answer once the server has seen a closed stream end: until then the completion it cancels
    is still listed, and its answer is the one of a completion not armed."""
    deadline = time.monotonic() + 30
    while (answer := _control(server, body).json())["message"] == "reasoning control not enabled for this completion":
        assert time.monotonic() < deadline, "the closed stream's completion was never dropped"
        time.sleep(0.01)
    return answer


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"action": "reasoning_end"}, "missing completion id"),
        ({"id": "chatcmpl-x", "action": "pause"}, "unknown control action"),
    ],
)
def test_a_control_without_an_id_or_with_another_action_is_a_400(
    server: ServerThread, body: dict[str, Any], message: str
) -> None:
    response = _control(server, body)
    assert (response.status_code, response.json()["error"]["message"]) == (400, message)
    assert response.json()["error"]["type"] == "invalid_request_error"
