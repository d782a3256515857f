"""Frigate's llama.cpp provider asking for a tool with ``tool_choice: "required"`` about a camera snapshot, against
a VL model with its projector: the provider reads the call (whole and streamed, content None), also when
``max_tokens`` cuts the call list after the call, with nothing of the call markup in the content."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.testing import image_bytes
from tests.api.openai.test_frigate_stream import consume
from tests.conftest import ServerThread, vl_settings

STATUS = {
    "type": "function",
    "function": {
        "name": "get_camera_status",
        "description": "The status of one camera",
        "parameters": {
            "type": "object",
            "properties": {"camera": {"type": "string", "enum": ["front_door", "back_yard"]}},
            "required": ["camera"],
        },
    },
}
SNAPSHOT = base64.b64encode(image_bytes(64, 48, seed=7)).decode()
MESSAGES = [
    {"role": "system", "content": "You watch the cameras."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Is anything wrong here?"},
            {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{SNAPSHOT}"}},
        ],
    },
]


@pytest.fixture(scope="module")
def vl_server(server_factory: Callable[..., ServerThread], vl_gguf: Path, mmproj_gguf: Path) -> ServerThread:
    return server_factory(vl_settings(vl_gguf, mmproj_gguf))


def message_from_choice(choice: dict[str, Any]) -> dict[str, Any]:
    """The provider's ``_message_from_choice``: stripped content (None when empty), calls with dict arguments."""
    message = choice.get("message", {})
    content = (message.get("content") or "").strip() or None
    calls = [
        {"name": call["function"]["name"], "arguments": json.loads(call["function"]["arguments"])}
        for call in message.get("tool_calls") or []
    ]
    return {"content": content, "tool_calls": calls or None, "finish_reason": choice.get("finish_reason")}


@pytest.mark.parametrize(("max_tokens", "finish"), [(80, "tool_calls"), (33, "length")])
def test_required_tool_calls_reach_the_provider_whole_and_streamed(
    vl_server: ServerThread, max_tokens: int, finish: str
) -> None:
    # 35 tokens write the call and close its list; 33 stop after the call's ")" and before "]": cut, it still counts.
    options = {"tools": [STATUS], "tool_choice": "required", "max_tokens": max_tokens, "temperature": 0}
    payload = {"messages": MESSAGES, "model": "vl", **options}
    response = httpx.post(vl_server.url + "/v1/chat/completions", json=payload, timeout=120)
    result = message_from_choice(response.json()["choices"][0])
    expected = [{"name": "get_camera_status", "arguments": {"camera": "back_yard"}}]
    assert result == {"content": None, "tool_calls": expected, "finish_reason": finish}
    streamed = asyncio.run(consume(vl_server.url, MESSAGES, **options))
    assert streamed["content"] == "" and streamed["finish_reason"] == finish
    assert [{"name": c["name"], "arguments": c["arguments"]} for c in streamed["tool_calls"]] == expected
