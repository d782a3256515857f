"""A streaming tool-calling consumer written the way Frigate's llama.cpp provider reads llama-server.

It posts with ``stream_options.include_usage`` and ``timings_per_token``, reads ``data:`` lines, and
collects reasoning deltas, content deltas, tool calls by index (arguments decoded to dicts) and the
stats a provider shows (token counts from ``usage``, speed from ``timings``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.settings import Settings
from tests.conftest import ServerThread

PICK = {
    "type": "function",
    "function": {
        "name": "pick_camera",
        "description": "Choose a camera",
        "parameters": {"type": "object", "properties": {"camera": {"enum": ["front", "back"]}}, "required": ["camera"]},
    },
}


async def consume(url: str, messages: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": "tiny",
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "timings_per_token": True,
        **options,
    }
    result: dict[str, Any] = {"content": "", "reasoning": "", "stats": [], "finish_reason": None}
    calls: dict[int, dict[str, Any]] = {}
    async with httpx.AsyncClient(timeout=60) as client:
        async with client.stream("POST", url + "/v1/chat/completions", json=payload) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[len("data: ") :].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                usage, timings = chunk.get("usage") or {}, chunk.get("timings") or {}
                if usage or timings:
                    result["stats"].append(
                        {
                            "prompt_tokens": usage.get("prompt_tokens", timings.get("prompt_n")),
                            "completion_tokens": usage.get("completion_tokens", timings.get("predicted_n")),
                            "tokens_per_second": timings.get("predicted_per_second"),
                        }
                    )
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    result["finish_reason"] = choice.get("finish_reason") or result["finish_reason"]
                    result["reasoning"] += delta.get("reasoning_content") or ""
                    result["content"] += delta.get("content") or ""
                    for part in delta.get("tool_calls") or []:
                        call = calls.setdefault(part["index"], {"id": "", "name": "", "arguments": ""})
                        function = part.get("function") or {}
                        call["id"] = part.get("id") or call["id"]
                        call["name"] = function.get("name") or call["name"]
                        call["arguments"] += function.get("arguments") or ""
    result["tool_calls"] = [
        {"id": calls[i]["id"], "name": calls[i]["name"], "arguments": json.loads(calls[i]["arguments"] or "{}")}
        for i in sorted(calls)
    ]
    return result


@pytest.fixture(scope="module")
def server(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    return server_factory(Settings.of(model=str(tiny_gguf), ctx_size=8192, parallel=2, threads=2))


def test_provider_reads_capabilities_from_props(server: ServerThread) -> None:
    props = httpx.get(server.url + "/props").json()
    assert props["chat_template_caps"]["supports_tools"] is True
    assert props["default_generation_settings"]["n_ctx"] == 4096
    assert "enable_thinking" not in props["chat_template"]  # so the provider sends no thinking toggle


def test_stream_with_tools_gives_content_calls_and_stats(server: ServerThread) -> None:
    messages = [{"role": "user", "content": "Which camera saw the person?"}]
    # The random model opens a call when <|tool_call_start|> (id 10) is favoured; the grammar makes it valid.
    result = asyncio.run(
        consume(
            server.url,
            messages,
            tools=[PICK],
            tool_choice="auto",
            temperature=0,
            max_tokens=200,
            parallel_tool_calls=False,
            logit_bias={"10": 6},
            chat_template_kwargs={"enable_thinking": False},
        )
    )
    assert result["finish_reason"] == "tool_calls"
    assert result["content"] and "<|tool_call" not in result["content"]
    assert result["tool_calls"] and all(c["id"].startswith("call_") for c in result["tool_calls"])
    assert all(
        c["name"] == "pick_camera" and c["arguments"]["camera"] in ("front", "back") for c in result["tool_calls"]
    )
    final = result["stats"][-1]
    assert final["prompt_tokens"] > 0 and final["completion_tokens"] > 0 and final["tokens_per_second"] > 0
    running = [s["completion_tokens"] for s in result["stats"][:-1]]
    assert running == sorted(running) and len(running) > 3  # live counts while streaming


def test_stream_with_reasoning_gives_reasoning_then_content(server: ServerThread) -> None:
    grammar = 'root ::= "<think>" [a-z]{3,10} "</think>" [A-Z][a-z]{2,9}'
    result = asyncio.run(
        consume(server.url, [{"role": "user", "content": "Summarize."}], grammar=grammar, seed=3, max_tokens=40)
    )
    assert result["finish_reason"] == "stop" and result["tool_calls"] == []
    assert result["reasoning"].isalpha() and result["reasoning"].islower()
    assert result["content"][0].isupper() and result["content"][1:].islower()
    assert result["stats"][-1]["completion_tokens"] > 2
