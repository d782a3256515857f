"""Anthropic's Messages body adapted into the chat layer's neutral request: the same request the OpenAI body that
llama-server's ``server_chat_convert_anthropic_to_oai`` writes would make, field by field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lfmserve.api.anthropic.protocol import MessagesRequest, normalize_billing_header
from lfmserve.api.body import parse_body
from lfmserve.api.openai.protocol import ChatCompletionRequest
from lfmserve.chat.request import ChatRequest, GenerationOptions, Message, NamedTool
from lfmserve.errors import InvalidRequest

PIXEL = "iVBORw0KGgo="
WEATHER = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _messages(body: dict[str, Any]) -> MessagesRequest:
    return parse_body(MessagesRequest, json.dumps(body).encode())


def _openai(body: dict[str, Any]) -> ChatRequest:
    return parse_body(ChatCompletionRequest, json.dumps(body).encode()).to_chat_request()


def test_a_conversation_becomes_the_chat_llama_servers_conversion_makes() -> None:
    anthropic = _messages(
        {
            "model": "claude-x",
            "max_tokens": 64,
            "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief.", "cache_control": {}}],
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Look"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
                        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "Need the ", "signature": "sig"},
                        {"type": "redacted_thinking", "data": "opaque"},
                        {"type": "thinking", "thinking": "weather."},
                        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Zürich"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Here:"},
                        {"type": "tool_result", "tool_use_id": "t1", "content": "sunny", "is_error": True},
                        {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "a"}]},
                        {"type": "tool_result", "tool_use_id": "t3"},
                    ],
                },
                {"role": "assistant", "content": "Sunny."},
            ],
            "tools": [WEATHER],
        }
    )
    # What llama-server hands its chat-completions path for this body.
    openai = _openai(
        {
            "max_tokens": 64,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Look"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
                        {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": "",
                    "reasoning_content": "Need the weather.",
                    "tool_calls": [
                        {
                            "id": "t1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Zürich"}'},
                        }
                    ],
                },
                {"role": "user", "content": [{"type": "text", "text": "Here:"}]},
                {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "t2", "content": "a"},
                {"role": "tool", "tool_call_id": "t3", "content": ""},
                {"role": "assistant", "content": "Sunny."},
            ],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "description": "Weather in a city",
                        "parameters": WEATHER["input_schema"],
                    },
                }
            ],
        }
    )
    assert anthropic.to_chat_request() == openai


def test_a_tool_result_with_an_image_keeps_its_parts() -> None:
    body = _messages(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [
                                {"type": "text", "text": "File: a.png"},
                                {"type": "image", "source": {"type": "base64", "data": PIXEL}},
                            ],
                        }
                    ],
                }
            ]
        }
    )
    assert (
        body.to_chat_request().messages
        == _openai(
            {
                "messages": [
                    {
                        "role": "tool",
                        "tool_call_id": "t1",
                        "content": [
                            {"type": "text", "text": "File: a.png"},
                            {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{PIXEL}"}},
                        ],
                    }
                ]
            }
        ).messages
    )


def test_generation_fields_and_the_default_max_tokens() -> None:
    body = _messages(
        {
            "messages": [{"role": "user", "content": "Hi"}],
            "stop_sequences": ["\n", "END"],
            "temperature": 0.5,
            "top_k": 40,
            "top_p": 0.9,
            "seed": 7,
            "metadata": {"user_id": "u1"},
            "thinking": {"type": "enabled", "budget_tokens": 50},
            "chat_template_kwargs": {"enable_thinking": False},
        }
    )
    request = body.to_chat_request()
    assert request.generation == GenerationOptions(
        sampling={"temperature": 0.5, "top_k": 40, "top_p": 0.9, "seed": 7},
        max_tokens=4096,
        stop=("\n", "END"),
    )
    assert request.template_kwargs == {"enable_thinking": False}
    assert (request.tools, request.tool_choice, request.parallel_tool_calls) == ((), "auto", True)
    assert _messages({"messages": [], "max_tokens": 3}).to_chat_request().generation.max_tokens == 3


@pytest.mark.parametrize(
    ("choice", "expected", "parallel"),
    [
        ({"type": "auto"}, "auto", True),
        ({"type": "any", "disable_parallel_tool_use": True}, "required", False),
        ({"type": "tool", "name": "get_weather"}, NamedTool("get_weather"), True),
        ({"type": "none"}, "none", True),
    ],
)
def test_tool_choice(choice: dict[str, Any], expected: object, parallel: bool) -> None:
    request = _messages({"messages": [], "tools": [WEATHER], "tool_choice": choice}).to_chat_request()
    assert (request.tool_choice, request.parallel_tool_calls) == (expected, parallel)


def test_a_tool_without_a_schema_declares_no_parameters() -> None:
    request = _messages({"messages": [], "tools": [{"name": "web_search", "type": "web_search_20250305"}]})
    assert request.to_chat_request().tools == (
        {"type": "function", "function": {"name": "web_search", "description": "", "parameters": {}}},
    )


def test_the_system_string_and_claude_codes_billing_stamp() -> None:
    header = "x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=a5145;You are Claude Code."
    request = _messages({"system": header, "messages": [{"role": "user", "content": "Hi"}]}).to_chat_request()
    assert request.messages == (
        Message(role="system", content=header.replace("cch=a5145;", "cch=fffff;")),
        Message(role="user", content="Hi"),
    )
    assert (
        normalize_billing_header("x-anthropic-billing-header: cch=abc;rest")
        == "x-anthropic-billing-header: cch=abc;rest"
    )
    assert normalize_billing_header("Plain cch=a5145; text") == "Plain cch=a5145; text"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"max_tokens": 5}, "Missing required field 'messages'"),
        ({"messages": [{"role": "system", "content": "x"}]}, "Invalid value for 'messages.0.role'"),
        ({"messages": [{"role": "user"}]}, "Missing required field 'messages.0.content'"),
        (
            {"messages": [{"role": "user", "content": [{"type": "document"}]}]},
            "Invalid value for 'messages.0.content.0': Input tag 'document' found using 'type' does not match",
        ),
        (
            {"messages": [], "tool_choice": {"type": "tool"}},
            "Invalid value for 'tool_choice': Value error, tool_choice of type 'tool' needs 'name'",
        ),
        ({"messages": [], "max_tokens": "10"}, "Invalid value for 'max_tokens': Input should be a valid integer"),
        ({"messages": [], "stop_sequences": "END"}, "Invalid value for 'stop_sequences'"),
    ],
)
def test_bad_bodies_are_400s_naming_the_field(body: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        _messages(body)
    assert caught.value.status_code == 400 and caught.value.message.startswith(message), caught.value.message
