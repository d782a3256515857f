"""Tool calling and structured output end to end: the official openai client against the tiny LFM2 model.

The random model never writes a call or JSON on its own; the grammar-constrained sampler is what makes
it, so these tests check the constraint as much as the parsing: every call names a declared tool and
its arguments validate against that tool's schema, for many seeds, streamed and not.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from lfmserve.settings import Settings
from tests.conftest import ServerThread, fixture_template

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1, "maxLength": 12},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "detailed": {"type": "boolean"},
                "ratio": {"type": "number", "minimum": 0.25, "maximum": 0.75},
            },
            "required": ["city", "days"],
        },
    },
}
SEARCH: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "web.search",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "maxLength": 10},
                "filters": {
                    "type": "object",
                    "properties": {"site": {"type": "string", "maxLength": 8}, "n": {"type": "integer"}},
                    "required": ["n"],
                },
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 3},
            },
            "required": ["query", "tags"],
        },
    },
}
CHOICE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "pick_city",
        "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"]},
    },
}
TOOLS = [WEATHER, SEARCH]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in [*TOOLS, CHOICE_TOOL]}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def tools_server(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    """Room for tool lists: the tiny vocabulary spends a token on almost every JSON character."""
    return server_factory(Settings(model=str(tiny_gguf), ctx_size=8192, parallel=2, threads=2))


@pytest.fixture(scope="module")
def client(tools_server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=tools_server.url + "/v1", api_key="not-needed")


def _valid_calls(calls: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, SCHEMAS[call.function.name])
        out.append((call.function.name, arguments))
    return out


def _stream_calls(client: openai.OpenAI, **request: Any) -> tuple[list[tuple[str, dict[str, Any]]], str, str]:
    """Accumulate a streamed answer the way OpenAI documents it: headers by index, then argument fragments."""
    calls: dict[int, dict[str, str]] = {}
    content, finish = "", ""
    for chunk in client.chat.completions.create(model="tiny", stream=True, **request):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        finish = choice.finish_reason or finish
        for part in choice.delta.tool_calls or []:
            if part.id is not None:
                assert part.index not in calls and part.function is not None and part.type == "function"
                calls[part.index] = {"id": part.id, "name": part.function.name or "", "arguments": ""}
            assert part.function is not None
            calls[part.index]["arguments"] += part.function.arguments or ""
    assert sorted(calls) == list(range(len(calls)))
    parsed = [(calls[i]["name"], json.loads(calls[i]["arguments"])) for i in sorted(calls)]
    for name, arguments in parsed:
        jsonschema.validate(arguments, SCHEMAS[name])
    return parsed, content, finish


def test_required_tool_choice_always_returns_schema_valid_calls(client: openai.OpenAI) -> None:
    names = set()
    for seed in range(8):
        request: dict[str, Any] = {
            "messages": ASK,
            "tools": TOOLS,
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "max_tokens": 300,
            "temperature": 1.0,
            "seed": seed,
        }
        response = client.chat.completions.create(model="tiny", **request)
        choice = response.choices[0]
        assert choice.finish_reason == "tool_calls", choice.message.content
        assert choice.message.content == ""  # nothing before the call, and never the markup
        calls = _valid_calls(choice.message.tool_calls or [])
        assert calls
        names |= {name for name, _ in calls}
        streamed, content, finish = _stream_calls(client, **request)
        assert (streamed, content, finish) == (calls, "", "tool_calls")  # same seed, same calls
    assert names == {"get_weather", "web.search"}  # both tools are reachable


def test_a_named_function_is_the_only_call(client: openai.OpenAI) -> None:
    for seed in range(4):
        request: dict[str, Any] = {
            "messages": ASK,
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "web.search"}},
            "max_tokens": 300,
            "temperature": 1.0,
            "seed": seed,
        }
        response = client.chat.completions.create(model="tiny", **request)
        calls = _valid_calls(response.choices[0].message.tool_calls or [])
        assert [name for name, _ in calls] == ["web.search"]
        streamed, _, finish = _stream_calls(client, **request)
        assert (streamed, finish) == (calls, "tool_calls")


def test_auto_tool_choice_constrains_a_call_once_the_model_opens_one(client: openai.OpenAI) -> None:
    # A bias on <|tool_call_start|> (id 10) makes the random model open a call after some text.
    request: dict[str, Any] = {
        "messages": ASK,
        "tools": [CHOICE_TOOL],
        "max_tokens": 200,
        "temperature": 0,
        "parallel_tool_calls": False,
        "logit_bias": {"10": 6},
    }
    response = client.chat.completions.create(model="tiny", **request)
    choice = response.choices[0]
    calls = _valid_calls(choice.message.tool_calls or [])
    assert len(calls) == 1 and choice.finish_reason == "tool_calls"
    assert choice.message.content and "<|tool_call" not in choice.message.content
    streamed, content, finish = _stream_calls(client, **request)
    assert (streamed, content, finish) == (calls, choice.message.content, "tool_calls")
    # Favoured more, the model keeps calling: six whole calls (indexes 0-5), then one cut off by the limit.
    request["logit_bias"] = {"10": 7}
    choice = client.chat.completions.create(model="tiny", **request).choices[0]
    calls = _valid_calls(choice.message.tool_calls or [])
    assert len(calls) == 6 and choice.finish_reason == "length"
    assert choice.message.content and choice.message.content.count("<|tool_call_start|>") == 1
    assert _stream_calls(client, **request) == (calls, choice.message.content, "length")


def test_a_call_cut_off_by_max_tokens_comes_back_as_text(client: openai.OpenAI) -> None:
    request: dict[str, Any] = {"messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 5}
    choice = client.chat.completions.create(model="tiny", **request).choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls
    assert choice.message.content and choice.message.content.startswith("<|tool_call_start|>[")
    streamed, content, finish = _stream_calls(client, **request)
    assert (streamed, content, finish) == ([], choice.message.content, "length")


# Frigate's review description is a pydantic model with string lengths and number ranges; this one
# adds the other features the converter supports (pattern, const, enum, $ref/$defs, anyOf, array sizes).
class Vehicle(BaseModel):
    wheels: Literal[2, 4]
    plate: str = Field(pattern=r"^[A-Z]{2}[0-9]{2}$")


class Review(BaseModel):
    title: str = Field(min_length=3, max_length=16)
    scene: str = Field(max_length=24)
    confidence: float = Field(ge=0.0, le=1.0)
    potential_threat_level: int = Field(ge=0, le=3)
    other_concerns: list[Annotated[str, Field(max_length=6)]] = Field(default_factory=list, min_length=1, max_length=2)
    kind: Literal["person"] | Vehicle
    camera: Literal["front"] = "front"


REVIEW_SCHEMA: dict[str, Any] = Review.model_json_schema()


def test_json_schema_response_format_is_valid_for_20_seeds(client: openai.OpenAI) -> None:
    outputs = set()
    for seed in range(20):
        response = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Describe the scene."}],
            response_format={"type": "json_schema", "json_schema": {"name": "review", "schema": REVIEW_SCHEMA}},
            max_tokens=400,
            temperature=1.0,
            seed=seed,
        )
        choice = response.choices[0]
        assert choice.finish_reason == "stop"
        assert choice.message.content is not None
        value = json.loads(choice.message.content)
        jsonschema.validate(value, REVIEW_SCHEMA)
        Review.model_validate(value)
        assert set(value) <= set(REVIEW_SCHEMA["properties"])  # no invented keys
        outputs.add(choice.message.content)
    assert len(outputs) == 20


def test_json_object_and_native_constraints(tools_server: ServerThread) -> None:
    url = tools_server.url
    body = {"messages": ASK, "max_tokens": 200, "temperature": 1.0, "seed": 1}
    response = httpx.post(url + "/v1/chat/completions", json={**body, "response_format": {"type": "json_object"}})
    assert isinstance(json.loads(response.json()["choices"][0]["message"]["content"]), dict)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 9}}, "required": ["n"]}
    native = httpx.post(url + "/completion", json={"prompt": "x", "n_predict": 50, "json_schema": schema, "seed": 2})
    assert 5 <= json.loads(native.json()["content"])["n"] <= 9
    grammar = 'root ::= "yes" | "no" | "maybe " [0-9]'
    texts = {
        httpx.post(url + "/completion", json={"prompt": "x", "n_predict": 9, "grammar": grammar, "seed": s}).json()[
            "content"
        ]
        for s in range(6)
    }
    assert texts and all(t in ("yes", "no") or (t.startswith("maybe ") and t[-1].isdigit()) for t in texts)


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
        ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "tools cannot be combined"),
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


THINKING = 'root ::= "<think>" [a-z]{2,12} " plan</think>" [A-Z][a-z ]{3,20}'


def test_reasoning_is_split_from_content_whole_and_streamed(client: openai.OpenAI) -> None:
    request: dict[str, Any] = {"messages": ASK, "max_tokens": 60, "seed": 4, "extra_body": {"grammar": THINKING}}
    message = client.chat.completions.create(model="tiny", **request).choices[0].message
    reasoning = message.model_extra["reasoning_content"] if message.model_extra else None
    assert reasoning and reasoning.endswith(" plan") and "<think>" not in reasoning
    assert message.content and message.content[0].isupper() and "think>" not in message.content
    kinds, joined = [], {"reasoning_content": "", "content": ""}
    for chunk in client.chat.completions.create(model="tiny", stream=True, **request):
        delta = chunk.choices[0].delta.model_dump(exclude_none=True) if chunk.choices else {}
        for key in joined:
            if delta.get(key):
                joined[key] += delta[key]
                kinds.append(key)
    assert joined == {"reasoning_content": reasoning, "content": message.content}
    assert kinds.index("content") > kinds.index("reasoning_content")
    raw = client.chat.completions.create(
        model="tiny", **{**request, "extra_body": {**request["extra_body"], "reasoning_format": "none"}}
    )
    assert raw.choices[0].message.content == f"<think>{reasoning}</think>{message.content}"


def test_a_think_block_cut_off_is_all_reasoning(tools_server: ServerThread) -> None:
    body = {"messages": ASK, "max_tokens": 4, "grammar": THINKING, "seed": 4}
    choice = httpx.post(tools_server.url + "/v1/chat/completions", json=body).json()["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] == "" and choice["message"]["reasoning_content"]


def test_logprobs_in_chat_native_and_legacy_shapes(client: openai.OpenAI, tools_server: ServerThread) -> None:
    request: dict[str, Any] = {
        "model": "tiny",
        "messages": ASK,
        "max_tokens": 6,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 3,
        "extra_body": {"ignore_eos": True},
    }
    choice = client.chat.completions.create(**request).choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    steps = choice.logprobs.content
    assert len(steps) == 6 and "".join(s.token for s in steps) == choice.message.content
    for step in steps:
        assert len(step.top_logprobs) == 3 and step.top_logprobs[0].token == step.token  # greedy takes the top one
        assert step.logprob == pytest.approx(step.top_logprobs[0].logprob) and step.logprob <= 0
        assert [t.logprob for t in step.top_logprobs] == sorted((t.logprob for t in step.top_logprobs), reverse=True)
        assert bytes(step.bytes or []).decode("utf-8", "replace") == step.token
    streamed = client.chat.completions.create(**request, stream=True)
    streamed_steps = [
        s for c in streamed if c.choices and c.choices[0].logprobs for s in c.choices[0].logprobs.content or []
    ]
    assert [(s.token, s.logprob) for s in streamed_steps] == [(s.token, s.logprob) for s in steps]
    native = httpx.post(
        tools_server.url + "/completion", json={"prompt": "Hello", "n_predict": 3, "n_probs": 2, "temperature": 0}
    ).json()
    probs = native["completion_probabilities"]
    assert len(probs) == native["tokens_predicted"] and set(probs[0]) == {
        "id",
        "token",
        "bytes",
        "logprob",
        "top_logprobs",
    }
    assert probs[0]["top_logprobs"][0]["id"] == probs[0]["id"] and len(probs[0]["top_logprobs"]) == 2
    legacy = httpx.post(
        tools_server.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 3, "logprobs": 2, "temperature": 0}
    ).json()["choices"][0]["logprobs"]
    assert legacy["tokens"] == [p["token"] for p in probs] and legacy["token_logprobs"] == [p["logprob"] for p in probs]
    assert legacy["text_offset"][0] == 0 and all(len(top) == 2 for top in legacy["top_logprobs"])


# -- a three-turn tool conversation, rendered by each fixture template --------------------------------
CITY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris"]}}, "required": ["city"]},
    },
}
RESULT = '{"temperature": 21}'


def _expected(template: str, answer: str) -> str:
    tools_json = json.dumps([CITY_TOOL])
    call_double = '<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>'
    turns = {
        "lfm2-tools.jinja": (
            "<|im_start|>system\nList of tools: "
            f"<|tool_list_start|>[{json.dumps(CITY_TOOL)}]<|tool_list_end|><|im_end|>\n",
            f"<|im_start|>assistant\n{call_double}<|im_end|>\n",
            f"<|im_start|>tool\n<|tool_response_start|>{RESULT}<|tool_response_end|><|im_end|>\n",
        ),
        "lfm2.5-instruct.jinja": (
            f"<|im_start|>system\nList of tools: [{json.dumps(CITY_TOOL)}]<|im_end|>\n",
            f"<|im_start|>assistant\n{call_double}<|im_end|>\n",
            f"<|im_start|>tool\n{RESULT}<|im_end|>\n",
        ),
        "lfm2.5-8b-a1b.jinja": (
            f"<|im_start|>system\nToday's date: {datetime.now():%Y-%m-%d}\n\nList of tools: {tools_json}<|im_end|>\n",
            "<|im_start|>assistant\n<|tool_call_start|>[get_weather(city='Paris')]<|tool_call_end|><|im_end|>\n",
            f"<|im_start|>tool\n{RESULT}<|im_end|>\n",
        ),
    }[template]
    system, call, result = turns
    return (
        f"<|startoftext|>{system}<|im_start|>user\nWeather in Paris?<|im_end|>\n{call}{result}"
        f"<|im_start|>assistant\n{answer}<|im_end|>\n<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("template", ["lfm2-tools.jinja", "lfm2.5-instruct.jinja", "lfm2.5-8b-a1b.jinja"])
def test_three_turn_tool_conversation_renders_as_the_template_expects(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path, template: str
) -> None:
    server = server_factory(
        Settings(
            model=str(tiny_gguf),
            ctx_size=4096,
            parallel=1,
            threads=2,
            chat_template_file=str(fixture_template(template)),
        )
    )
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x")
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.chat.completions.create(
        model="tiny",
        messages=messages,
        tools=[CITY_TOOL],
        tool_choice="required",
        max_tokens=40,
        parallel_tool_calls=False,
    )
    assert first.choices[0].message.tool_calls, first
    call = first.choices[0].message.tool_calls[0]
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city": "Paris"}')
    messages.append({"role": "assistant", "content": None, "tool_calls": [call.model_dump()]})
    messages.append({"role": "tool", "tool_call_id": call.id, "content": RESULT})
    second = client.chat.completions.create(model="tiny", messages=messages, tools=[CITY_TOOL], max_tokens=8)
    answer = second.choices[0].message.content or ""
    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Thanks!"}]
    third = client.chat.completions.create(model="tiny", messages=messages, tools=[CITY_TOOL], max_tokens=4)
    rendered = httpx.post(server.url + "/apply-template", json={"messages": messages, "tools": [CITY_TOOL]}).json()
    assert rendered["prompt"] == _expected(template, answer)
    tokenized = httpx.post(server.url + "/tokenize", json={"content": rendered["prompt"]}).json()["tokens"]
    assert third.usage is not None and third.usage.prompt_tokens == len(tokenized)
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    assert first.usage is not None
    cached = second.usage.prompt_tokens_details.cached_tokens
    if template == "lfm2.5-8b-a1b.jinja":  # renders the call with single quotes: the cache diverges inside it
        assert cached is not None and cached >= first.usage.prompt_tokens - 1
    else:  # the call is written back exactly as generated: all of it is reused (the end token was never decoded)
        assert cached == first.usage.prompt_tokens + first.usage.completion_tokens - 1


def test_a_tool_result_then_a_user_image_is_accepted_by_the_template(tools_server: ServerThread) -> None:
    messages = [
        {"role": "user", "content": "Look"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And this?"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
            ],
        },
    ]
    response = httpx.post(tools_server.url + "/apply-template", json={"messages": messages, "tools": [CITY_TOOL]})
    assert response.status_code == 200, response.text
    assert (
        "<|im_start|>tool\n<|tool_response_start|>sunny<|tool_response_end|><|im_end|>\n<|im_start|>user\n"
        in (response.json()["prompt"])
    )
    chat = httpx.post(tools_server.url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
    assert chat.status_code == 400 and "no multimodal projector" in chat.json()["error"]["message"]


def test_template_kwargs_reasoning_effort_and_past_reasoning_reach_the_template(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path, tmp_path: Path
) -> None:
    probe = tmp_path / "probe.jinja"
    probe.write_text(
        "{% for m in messages %}{{ m.role }}:{{ m.content }}|{{ m.thinking }}\n{% endfor %}"
        "thinking={{ enable_thinking | default('unset') }} effort={{ reasoning_effort | default('unset') }}"
        " keep={{ keep_past_thinking | default('unset') }}"
    )
    server = server_factory(Settings(model=str(tiny_gguf), ctx_size=2048, parallel=1, chat_template_file=str(probe)))
    history = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b", "reasoning_content": "r"},
        {"role": "user", "content": "c"},
    ]

    def rendered(**extra: Any) -> str:
        body = {"messages": history, **extra}
        return str(httpx.post(server.url + "/apply-template", json=body).json()["prompt"])

    lines = "user:a|\nassistant:b|r\nuser:c|\n"
    assert rendered() == lines + "thinking=unset effort=unset keep=unset"
    assert rendered(reasoning_effort="none") == lines + "thinking=False effort=none keep=unset"
    kwargs = {"enable_thinking": True, "keep_past_thinking": True}
    assert (
        rendered(reasoning_effort="none", chat_template_kwargs=kwargs) == lines + "thinking=True effort=none keep=True"
    )
    # The chat route renders through the same code: its prompt is the same tokens.
    chat = httpx.post(
        server.url + "/v1/chat/completions", json={"messages": history, "max_tokens": 1, "reasoning_effort": "none"}
    ).json()
    tokens = httpx.post(
        server.url + "/tokenize", json={"content": rendered(reasoning_effort="none"), "add_special": True}
    ).json()["tokens"]
    assert chat["usage"]["prompt_tokens"] == len(tokens)


def test_tool_choice_none_hides_the_tools(tools_server: ServerThread) -> None:
    def usage(**extra: Any) -> dict[str, Any]:
        body = {"messages": ASK, "max_tokens": 3, "temperature": 0, **extra}
        response = httpx.post(tools_server.url + "/v1/chat/completions", json=body).json()
        return {"prompt": response["usage"]["prompt_tokens"], "message": response["choices"][0]["message"]}

    plain, hidden, shown = usage(), usage(tools=TOOLS, tool_choice="none"), usage(tools=TOOLS)
    assert hidden == plain and shown["prompt"] > plain["prompt"]


def test_parameter_names_python_cannot_spell_get_json_calls(client: openai.OpenAI) -> None:
    mail = {
        "type": "function",
        "function": {
            "name": "send-mail",
            "parameters": {
                "type": "object",
                "properties": {"from": {"enum": ["me"]}, "subject-line": {"type": "string", "maxLength": 5}},
                "required": ["from", "subject-line"],
            },
        },
    }
    request: dict[str, Any] = {"messages": ASK, "tools": [mail], "tool_choice": "required", "max_tokens": 80}
    request["parallel_tool_calls"] = False
    choice = client.chat.completions.create(model="tiny", **request).choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice.message.content
    call = choice.message.tool_calls[0]
    arguments = json.loads(call.function.arguments)
    assert call.function.name == "send-mail" and arguments["from"] == "me" and len(arguments["subject-line"]) <= 5


def test_a_finished_grammar_ends_the_answer_even_with_ignore_eos(tools_server: ServerThread) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    body = {"messages": ASK, "max_tokens": 60, "ignore_eos": True, "json_schema": schema}
    choice = httpx.post(tools_server.url + "/v1/chat/completions", json=body).json()["choices"][0]
    assert choice["finish_reason"] == "stop" and json.loads(choice["message"]["content"]) in (
        {"ok": True},
        {"ok": False},
    )
