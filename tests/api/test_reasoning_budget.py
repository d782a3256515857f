"""Reasoning controls in every dialect, and budgets that hold, over real HTTP on a model whose template opens the
thinking for it (as LFM2.5 thinking templates do): once the budget is spent, ``</think>`` is written by force and
the answer follows, which is exactly the answer the model gives when the prompt closed the thinking itself."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from lfmserve.settings import Settings
from tests.conftest import ServerThread, sse_events

#: Opens ``<think>`` for the model unless ``enable_thinking`` is false, when it writes the block closed.
TEMPLATE = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and not enable_thinking -%}<think></think>{%- else -%}<think>{%- endif -%}"
    "{%- endif -%}"
)
ASK = [{"role": "user", "content": "Why is the sky blue?"}]


def _server(factory: Callable[..., ServerThread], model: Path, folder: Path, **options: Any) -> ServerThread:
    template = folder / "thinking.jinja"
    template.write_text(TEMPLATE)
    settings = Settings.of(model=str(model), ctx_size=1024, parallel=1, chat_template_file=str(template), **options)
    return factory(settings)


@pytest.fixture(scope="module")
def server(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> ServerThread:
    return _server(server_factory, tiny_gguf, tmp_path_factory.mktemp("budget"))


def chat(server: ServerThread, max_tokens: int = 16, **fields: Any) -> dict[str, Any]:
    body = {"messages": ASK, "max_tokens": max_tokens, "temperature": 0, **fields}
    response = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    message: dict[str, Any] = response.json()["choices"][0]["message"]
    return {"reasoning": message.get("reasoning_content") or "", "content": message["content"]}


def test_without_a_budget_the_model_thinks_to_the_limit(server: ServerThread) -> None:
    free = chat(server)
    assert free["reasoning"] and free["content"] == ""


def test_every_dialects_budget_ends_the_thinking_after_that_many_tokens(server: ServerThread) -> None:
    free = chat(server)["reasoning"]
    budgeted = chat(server, reasoning_budget_tokens=5)
    assert free.startswith(budgeted["reasoning"]) and len(budgeted["reasoning"]) < len(free)
    assert budgeted["content"]
    for fields in ({"thinking_budget_tokens": 5}, {"reasoning": {"max_tokens": 5}}):
        assert chat(server, **fields) == budgeted, fields
    with anthropic.Anthropic(base_url=server.url, api_key="none") as client:
        message = client.messages.create(
            model="m",
            max_tokens=16,
            messages=ASK,  # type: ignore[arg-type]
            thinking={"type": "enabled", "budget_tokens": 5},
            extra_body={"temperature": 0},
        )
        blocks = {block.type: block for block in message.content}
        assert blocks["thinking"].thinking == budgeted["reasoning"]  # type: ignore[union-attr]
        assert blocks["text"].text == budgeted["content"]  # type: ignore[union-attr]
        streamed = {"reasoning_content": "", "content": ""}
        body = {"messages": ASK, "max_tokens": 16, "temperature": 0, "stream": True, "reasoning_budget_tokens": 5}
        for event in sse_events(server, "/v1/chat/completions", body)[:-1]:
            delta = json.loads(event)["choices"][0]["delta"]
            for key in streamed:
                streamed[key] += delta.get(key) or ""
        assert (streamed["reasoning_content"], streamed["content"]) == (budgeted["reasoning"], budgeted["content"])


def test_budget_zero_answers_as_a_prompt_that_closed_the_thinking(server: ServerThread) -> None:
    # The forced </think> is one of the completion's tokens: the closed prompt's answer is one token shorter.
    closed = chat(server, max_tokens=15, chat_template_kwargs={"enable_thinking": False})
    assert chat(server, reasoning_budget_tokens=0) == {"reasoning": "", "content": closed["content"]}
    switched_off = chat(server, max_tokens=15, reasoning={"enabled": False})
    assert switched_off == closed  # reasoning.enabled is the template's switch


def test_the_message_is_written_before_the_end(server: ServerThread) -> None:
    budgeted = chat(server, reasoning_budget_tokens=5)
    told = chat(server, reasoning_budget_tokens=5, reasoning_budget_message=" Time to answer.")
    # The same five thinking tokens (whitespace before </think> is dropped from the shorter one), then the message.
    assert told["reasoning"].startswith(budgeted["reasoning"]) and told["reasoning"].endswith("\r Time to answer.")


@pytest.mark.slow  # a second server
def test_the_servers_budget_holds_unless_a_request_sets_its_own(
    server_factory: Callable[..., ServerThread],
    tiny_gguf: Path,
    tmp_path_factory: pytest.TempPathFactory,
    server: ServerThread,
) -> None:
    capped = _server(server_factory, tiny_gguf, tmp_path_factory.mktemp("capped"), reasoning_budget=0)
    assert chat(capped) == chat(server, reasoning_budget_tokens=0)
    assert chat(capped, reasoning_budget_tokens=5) == chat(server, reasoning_budget_tokens=5)
