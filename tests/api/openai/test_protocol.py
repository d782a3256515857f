"""OpenAI's bodies adapted into the chat layer's neutral request: every field, once, under the chat layer's names."""

from __future__ import annotations

import json

from lfmserve.api.body import parse_body
from lfmserve.api.openai.protocol import ApplyTemplateRequest, ChatCompletionRequest
from lfmserve.chat.request import ChatRequest, ContentPart, GenerationOptions, Message, NamedTool

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}", "extra": 1}}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": True}}


def _chat(body: dict[str, object]) -> ChatCompletionRequest:
    return parse_body(ChatCompletionRequest, json.dumps(body).encode())


def test_a_full_chat_body_becomes_one_chat_request() -> None:
    body = _chat(
        {
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Look"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    ],
                },
                {"role": "assistant", "content": None, "reasoning_content": "r", "tool_calls": [CALL]},
                {"role": "tool", "content": "sunny", "tool_call_id": "c1", "name": "f"},
                {
                    "role": "user",
                    "content": [{"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}}],
                },
            ],
            "tools": [TOOL],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "parallel_tool_calls": False,
            "response_format": {"type": "json_object"},
            "reasoning_format": "none",
            "reasoning_effort": "low",
            "chat_template_kwargs": {"enable_thinking": False},
            "add_generation_prompt": False,
            "max_completion_tokens": 5,
            "max_tokens": 9,
            "temperature": 0.2,
            "logprobs": True,
            "top_logprobs": 2,
        }
    )
    assert body.to_chat_request() == ChatRequest(
        messages=(
            Message(role="system", content="Be brief."),
            Message(
                role="user",
                content=(ContentPart("text", "Look"), ContentPart("image", source="data:image/png;base64,AAAA")),
            ),
            Message(role="assistant", reasoning_content="r", tool_calls=(CALL,)),
            Message(role="tool", content="sunny", tool_call_id="c1", name="f"),
            Message(role="user", content=(ContentPart("audio", source="UklG"),)),
        ),
        tools=(TOOL,),
        tool_choice=NamedTool("f"),
        parallel_tool_calls=False,
        response_schema={"type": "object"},
        reasoning_format="none",
        reasoning_effort="low",
        template_kwargs={"enable_thinking": False},
        add_generation_prompt=False,
        generation=GenerationOptions(sampling={"temperature": 0.2}, max_tokens=5, n_probs=2),
    )


def test_defaults_choose_auto_tools_and_free_text() -> None:
    request = _chat({"messages": [{"role": "user", "content": "Hi"}]}).to_chat_request()
    assert (request.tool_choice, request.tools, request.response_schema, request.generation.n_probs) == (
        "auto",
        (),
        None,
        None,
    )


def test_response_formats_give_the_schema_the_answer_follows() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    formats = {
        "text": ({"type": "text"}, None),
        "json_object": ({"type": "json_object"}, {"type": "object"}),
        "json_object with llama-server's schema": ({"type": "json_object", "schema": schema}, schema),
        "json_schema": ({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}, schema),
    }
    for response_format, expected in formats.values():
        body = _chat({"messages": [{"role": "user", "content": "Hi"}], "response_format": response_format})
        assert body.to_chat_request().response_schema == expected


def test_apply_template_takes_the_prompt_fields_only() -> None:
    body = parse_body(
        ApplyTemplateRequest,
        b'{"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "none", "temperature": "ignored"}',
    )
    assert body.to_chat_request() == ChatRequest(
        messages=(Message(role="user", content="Hi"),), reasoning_effort="none"
    )
