"""The chat flags over HTTP: server-wide template variables under a request's own, --skip-chat-parsing and
--prefill-assistant, each as llama-server does them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lfmserve.settings import Settings
from tests.conftest import ServerThread, fixture_template, post, sse_events


def _settings(tiny_gguf: Path, **fields: Any) -> Settings:
    return Settings.of(model=str(tiny_gguf), ctx_size=1024, parallel=1, threads=2, **fields)


def _prompt(server: ServerThread, **body: Any) -> str:
    response = post(server, "/apply-template", body)
    assert response.status_code == 200, response.text
    return str(response.json()["prompt"])


# -- --chat-template-kwargs, --reasoning-effort, --reasoning-preserve --------------------------------------------
#: Two finished turns with thinking, then a question: the LFM2.5 template drops the first turn's thinking unless
#: told keep_past_thinking (it always keeps the last assistant turn's).
THOUGHTFUL = [
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "<think>look it up</think>Sunny."},
    {"role": "user", "content": "Thanks"},
    {"role": "assistant", "content": "<think>polite</think>Bye."},
    {"role": "user", "content": "Again?"},
]


def _thoughtful_prompt(first_answer: str) -> str:
    return (
        "<|startoftext|><|im_start|>user\nWeather?<|im_end|>\n"
        f"<|im_start|>assistant\n{first_answer}<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n"
        "<|im_start|>assistant\n<think>polite</think>Bye.<|im_end|>\n<|im_start|>user\nAgain?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_chat_template_kwargs_keep_past_thinking_in_the_lfm25_instruct_prompt(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path
) -> None:
    template = str(fixture_template("lfm2.5-instruct.jinja"))
    plain = server_factory(_settings(tiny_gguf, chat_template_file=template))
    assert _prompt(plain, messages=THOUGHTFUL) == _thoughtful_prompt("Sunny.")
    keeping = server_factory(
        _settings(tiny_gguf, chat_template_file=template, chat_template_kwargs='{"keep_past_thinking": true}')
    )
    kept = _prompt(keeping, messages=THOUGHTFUL)
    assert kept == _thoughtful_prompt("<think>look it up</think>Sunny.")
    # A request's own chat_template_kwargs win over the server's.
    own = {"keep_past_thinking": False}
    assert _prompt(keeping, messages=THOUGHTFUL, chat_template_kwargs=own) == _thoughtful_prompt("Sunny.")
    # The chat route renders the same prompt: the same tokens.
    answer = post(keeping, "/v1/chat/completions", {"messages": THOUGHTFUL, "max_tokens": 1}).json()
    tokens = post(keeping, "/tokenize", {"content": kept}).json()["tokens"]
    assert answer["usage"]["prompt_tokens"] == len(tokens)


#: A template that prints what it is told about reasoning, under llama.cpp's names for it.
PROBE = (
    "{{ messages[0].content }}: effort={{ reasoning_effort | default('unset') }}"
    " strength={{ reasoning_strength | default('unset') }} preserve={{ preserve_reasoning | default('unset') }}"
    " preserve_thinking={{ preserve_thinking | default('unset') }} clear={{ clear_thinking | default('unset') }}"
    " truncate={{ truncate_history_thinking | default('unset') }} drop={{ drop_thinking | default('unset') }}"
    " x={{ x | default('unset') }}"
)


def _told(effort: str, preserve: bool | None, x: int | str, preserve_thinking: bool | None = None) -> str:
    """What :data:`PROBE` prints; ``preserve`` None: preserve_reasoning and its other names unset."""
    kept = preserve if preserve_thinking is None else preserve_thinking
    dropped = "unset" if preserve is None else not preserve
    return (
        f"hi: effort={effort} strength={effort} preserve={'unset' if preserve is None else preserve}"
        f" preserve_thinking={'unset' if kept is None else kept} clear={dropped} truncate={dropped} drop={dropped}"
        f" x={x}"
    )


@pytest.fixture(scope="module")
def probe_server(server_factory: Callable[..., ServerThread], tiny_gguf: Path, tmp_path_factory: Any) -> ServerThread:
    probe = tmp_path_factory.mktemp("templates") / "probe.jinja"
    probe.write_text(PROBE)
    settings = _settings(
        tiny_gguf, chat_template_file=str(probe), chat_template_kwargs='{"x": 1}', reasoning_effort="high"
    )
    return server_factory(settings)


@pytest.mark.parametrize(
    ("body", "told"),
    [
        # The server's: --reasoning-effort, --chat-template-kwargs (preserve_reasoning unset: the template's own).
        ({}, _told("high", None, 1)),
        ({"reasoning_effort": "low"}, _told("low", None, 1)),
        ({"reasoning": {"effort": "medium"}}, _told("medium", None, 1)),
        ({"chat_template_kwargs": {"reasoning_effort": "minimal", "x": 2}}, _told("minimal", None, 2)),
        ({"chat_template_kwargs": {"preserve_reasoning": False}}, _told("high", False, 1)),
        ({"chat_template_kwargs": {"preserve_reasoning": True}}, _told("high", True, 1)),
        # A variable given by its own name wins over the one preserve_reasoning stands for.
        (
            {"chat_template_kwargs": {"preserve_reasoning": True, "preserve_thinking": False}},
            _told("high", True, 1, preserve_thinking=False),
        ),
    ],
)
def test_the_servers_template_variables_are_under_the_requests(
    probe_server: ServerThread, body: dict[str, Any], told: str
) -> None:
    assert _prompt(probe_server, messages=[{"role": "user", "content": "hi"}], **body) == told


def test_without_the_flags_the_template_is_told_nothing_about_reasoning_and_with_one_it_is(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path, tmp_path: Path
) -> None:
    """llama-server would tell it preserve_reasoning=true; lfmserve leaves past reasoning to the template's own
    default unless --reasoning-preserve asks (docs/usage.md, "Reasoning")."""
    probe = tmp_path / "probe.jinja"
    probe.write_text(PROBE)
    server = server_factory(_settings(tiny_gguf, chat_template_file=str(probe)))
    assert _prompt(server, messages=[{"role": "user", "content": "hi"}]) == _told("unset", None, "unset")
    preserving = server_factory(_settings(tiny_gguf, chat_template_file=str(probe), reasoning_preserve=True))
    assert _prompt(preserving, messages=[{"role": "user", "content": "hi"}]) == _told("unset", True, "unset")


# -- --skip-chat-parsing and --prefill-assistant, against a server without them ---------------------------------
@pytest.fixture(scope="module")
def default_server(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    return server_factory(_settings(tiny_gguf))


@pytest.fixture(scope="module")
def flagged_server(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    return server_factory(_settings(tiny_gguf, skip_chat_parsing=True, prefill_assistant=False))


HI = [{"role": "user", "content": "hi"}]
#: The whole answer, forced: a think block, then the content.
THINK_THEN_HI = {"messages": HI, "max_tokens": 20, "grammar": 'root ::= "<think>hm</think>Hi"'}
CITY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "w",
        "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris"]}}, "required": ["city"]},
    },
}
CALL = {"messages": HI, "max_tokens": 40, "tools": [CITY_TOOL], "tool_choice": "required", "parallel_tool_calls": False}


def _choices(server: ServerThread, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = post(server, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    choices: list[dict[str, Any]] = response.json()["choices"]
    for choice in choices:
        for call in choice["message"].get("tool_calls", ()):
            call["id"] = "call"
    return choices


def test_skip_chat_parsing_returns_reasoning_and_tool_calls_as_content(
    default_server: ServerThread, flagged_server: ServerThread
) -> None:
    def answer(content: str, **more: Any) -> list[dict[str, Any]]:
        message = {"role": "assistant", "content": content, **more}
        finish = "tool_calls" if "tool_calls" in more else "stop"
        return [{"finish_reason": finish, "index": 0, "message": message}]

    assert _choices(default_server, THINK_THEN_HI) == answer("Hi", reasoning_content="hm")
    assert _choices(flagged_server, THINK_THEN_HI) == answer("<think>hm</think>Hi")
    call = {"id": "call", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert _choices(default_server, CALL) == answer("", tool_calls=[call])
    assert _choices(flagged_server, CALL) == answer('<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>')
    streamed = sse_events(flagged_server, "/v1/chat/completions", {**THINK_THEN_HI, "stream": True})
    deltas = [chunk["choices"][0]["delta"] for chunk in map(json.loads, streamed[:-1]) if chunk["choices"]]
    assert {key for delta in deltas for key in delta} == {"role", "content"}
    assert "".join(delta.get("content") or "" for delta in deltas) == "<think>hm</think>Hi"


def test_no_prefill_assistant_closes_a_final_assistant_message(
    default_server: ServerThread, flagged_server: ServerThread
) -> None:
    chat = [*HI, {"role": "assistant", "content": "Hel"}]
    opening = "<|startoftext|><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHel"
    assert _prompt(default_server, messages=chat) == opening
    assert _prompt(flagged_server, messages=chat) == opening + "<|im_end|>\n<|im_start|>assistant\n"
    # Asked for by name, the continuation still happens (llama-server's continue_final_message).
    asked = {"messages": chat, "continue_final_message": True, "add_generation_prompt": False}
    assert _prompt(flagged_server, **asked) == opening
    # Two assistant messages at the end are refused only where the last one would be continued.
    twice = [*chat, {"role": "assistant", "content": "lo"}]
    refused = post(default_server, "/apply-template", {"messages": twice})
    assert (refused.status_code, refused.json()["error"]["message"]) == (
        400,
        "Cannot have 2 or more assistant messages at the end of the list.",
    )
    assert _prompt(flagged_server, messages=twice) == (
        opening + "<|im_end|>\n<|im_start|>assistant\nlo<|im_end|>\n<|im_start|>assistant\n"
    )
