"""A chat request's plan: which tools the template sees, which constraint applies, and every conflict a 400."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from lfmserve.chat.request import ChatRequest, Message
from lfmserve.chat.serving import Serving
from lfmserve.loading.loader import load_serving
from lfmserve.settings import Settings
from tests.conftest import ASK, TOOLS, ServerThread


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}},
            'unsupported or invalid JSON schema: Unimplemented keys: ["not"]',
        ),
        ({"json_schema": {"type": "object"}, "grammar": "root ::= x"}, "use either 'json_schema' or 'grammar'"),
        ({"grammar": "root ::= undefined-rule"}, "invalid grammar"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "'nope'"),
        ({"tool_choice": "required"}, "tool_choice 'required' needs 'tools'"),
        ({"tools": TOOLS, "grammar": 'root ::= "x"'}, "a custom 'grammar' cannot be combined with tools"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"response_format": {"type": "json_schema"}}, "json_schema.schema"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
            "tool 'f': parameters must be a JSON schema of type object",
        ),
    ],
)
def test_bad_constraints_are_400_naming_the_problem(
    tools_server: ServerThread, body: dict[str, Any], message: str
) -> None:
    response = httpx.post(tools_server.url + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 4, **body})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and message in error["message"]


def test_tool_choice_none_hides_the_tools(tools_server: ServerThread) -> None:
    def usage(**extra: Any) -> dict[str, Any]:
        body = {"messages": ASK, "max_tokens": 3, "temperature": 0, **extra}
        response = httpx.post(tools_server.url + "/v1/chat/completions", json=body).json()
        return {"prompt": response["usage"]["prompt_tokens"], "message": response["choices"][0]["message"]}

    plain, hidden, shown = usage(), usage(tools=TOOLS, tool_choice="none"), usage(tools=TOOLS)
    assert hidden == plain and shown["prompt"] > plain["prompt"]


# -- an agent loop under templates without tools: an echoing model ends it ------------------------------------
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
#: What the forced first turn's constraint makes any model write.
FORCED_CALL = '<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>'
#: The prompt of the second turn, as llama-server's /apply-template renders it: ChatML drops the call.
SECOND_PROMPT = (
    "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n"
    '<|im_start|>tool\n{"temperature": 21}<|im_end|>\n<|im_start|>assistant\n'
)


def echo_own_turn(prompt: str) -> str:
    """A small model that repeats its own last turn as the prompt shows it."""
    turns = prompt.split("<|im_start|>assistant\n")
    return turns[-2].split("<|im_end|>")[0] + "Done." if len(turns) > 2 else "Done."


def echo_bare_call(prompt: str) -> str:
    """A small model that writes the call it made the way LFM models write one without markers."""
    return '[get_weather(city="Paris")] Done.'


@pytest.fixture(
    scope="module",
    params=["tiny LFM2, --chat-template chatml", "Gemma-3-270M (no template: ChatML)"],
)
def chatml_serving(request: pytest.FixtureRequest) -> Iterator[Serving]:
    """ChatML without tools, with the call markers as tokens (the tiny LFM2) and without them (Gemma)."""
    tiny = request.param.startswith("tiny")
    model = str(request.getfixturevalue("tiny_gguf" if tiny else "gemma_gguf"))
    settings = Settings.of(model=model, ctx_size=1024, parallel=1, threads=1, chat_template="chatml" if tiny else None)
    serving = load_serving(settings, model)
    yield serving
    serving.close()


@pytest.mark.parametrize("echo", [echo_own_turn, echo_bare_call])
def test_an_agent_loop_with_an_echoing_model_ends_under_a_template_without_tools(
    chatml_serving: Serving, echo: Callable[[str], str]
) -> None:
    """Forced call, its result, then ``auto`` turns (at most 3): the call never reaches the prompt, and an
    ``auto`` answer's call-like text is content, so the second turn answers."""
    messages = [Message(role="user", content="Weather in Paris?")]
    prompts, answers = [], []
    for turn in range(3):
        choice = "required" if turn == 0 else "auto"
        request = ChatRequest(messages=tuple(messages), tools=(WEATHER_TOOL,), tool_choice=choice)
        prompts.append(chatml_serving.render_chat(request))
        _, parser = chatml_serving.prepare_chat(request)
        answer = parser.parse(FORCED_CALL if turn == 0 else echo(prompts[-1]))
        answers.append(answer)
        if not answer.calls:
            break
        calls = tuple(call.to_json() for call in answer.calls)
        messages += [
            Message(role="assistant", content=answer.content, tool_calls=calls),
            Message(role="tool", content='{"temperature": 21}', tool_call_id=answer.calls[0].id),
        ]
    assert [(call.name, call.arguments) for call in answers[0].calls] == [("get_weather", '{"city": "Paris"}')]
    assert prompts[1] == SECOND_PROMPT
    assert (len(answers), answers[1].calls, answers[1].content) == (2, [], echo(SECOND_PROMPT))
