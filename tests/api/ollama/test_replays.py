"""What Home Assistant, Zed, VS Code Copilot and Frigate send to an Ollama server, replayed byte for byte as they
send it (the bodies of their current sources), and what each reads back checked the way each parses it: Zed's
strict structs, Copilot's version check and context lookup, the ollama client's required fields (Home Assistant
and Frigate use it).

The sources: home-assistant/core ``components/ollama`` (through ollama-python 0.6.2: ``keep_alive`` ``-1`` sent
as ``-1.0``, ``tools: []`` always, empty contents dropped, tool results without a name), zed-industries/zed
``crates/ollama`` (every option key sent, unset ones ``null``; ``id`` required on tool calls),
microsoft/vscode-copilot-chat ``byok/vscode-node/ollamaProvider.ts``, blakeblackshear/frigate
``genai/plugins/ollama.py`` (``/api/generate`` with a schema and snapshots).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.settings import Settings
from lfmserve.testing import image_bytes
from tests.conftest import ServerThread, vl_settings

NAME = "tiny-lfm2.gguf:latest"
HA_TOOL = {
    "type": "function",
    "function": {
        "name": "HassTurnOn",
        "description": "Turns on a device",
        "parameters": {"type": "object", "required": [], "properties": {"name": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def server(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    return server_factory(Settings.of(model=str(tiny_gguf), ctx_size=8192, parallel=2, threads=2))


def lines_of(response: httpx.Response) -> list[dict[str, Any]]:
    """An NDJSON body as the ollama client and Zed read it: every line one object (a blank line fails both)."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-ndjson"
    assert response.text.endswith("\n") and "\n\n" not in response.text
    return [json.loads(line) for line in response.text.split("\n")[:-1]]


# -- Home Assistant ---------------------------------------------------------------------------------------------
def test_home_assistant_finds_its_model_by_exact_name_and_pulls_without_streaming(server: ServerThread) -> None:
    tags = httpx.get(server.url + "/api/tags").json()
    assert NAME in {model["model"] for model in tags["models"]}  # HA's exact-string test, or it pulls
    pulled = httpx.post(server.url + "/api/pull", json={"model": NAME, "stream": False, "insecure": False})
    assert (pulled.status_code, pulled.json()) == (200, {"status": "success"})
    ps = httpx.get(server.url + "/api/ps").json()["models"]
    assert [(m["model"], type(m["size"]), m["size_vram"]) for m in ps] == [(NAME, int, 0)]


@pytest.mark.parametrize("keep_alive", [-1.0, "-1s", "300s"])
def test_home_assistant_chat_with_tools_history_and_images_streams_messages(
    server: ServerThread, keep_alive: float | str
) -> None:
    body = {
        "model": NAME,
        "stream": True,
        "options": {"num_ctx": 8192.0},
        "keep_alive": keep_alive,
        "messages": [
            {"role": "system", "content": "You are a voice assistant for Home Assistant."},
            {"role": "user", "content": "turn on the kitchen"},
            {
                "role": "assistant",
                "tool_calls": [{"function": {"name": "HassTurnOn", "arguments": {"name": "kitchen"}}}],
            },
            {"role": "tool", "content": '{"data":{"success":[]},"error":null}'},
            {"role": "user", "content": "thanks"},
        ],
        "tools": [HA_TOOL],
        "think": False,
    }
    lines = lines_of(
        httpx.post(server.url + "/api/chat", json={**body, "options": {"num_ctx": 8192.0, "num_predict": 5}})
    )
    for line in lines:  # what HA's _transform_stream reads: message (required), its content, thinking, tool calls
        message = line["message"]
        assert message["role"] == "assistant" and isinstance(message["content"], str)
        for call in message.get("tool_calls", []):
            assert isinstance(call["function"]["name"], str) and isinstance(call["function"]["arguments"], dict)
    assert lines[-1]["done"] is True and lines[-1]["eval_count"] == 5


def test_home_assistant_ai_task_gets_json_in_its_schema(server: ServerThread) -> None:
    schema = {
        "type": "object",
        "properties": {"color": {"type": "string", "enum": ["red", "blue"]}},
        "required": ["color"],
    }
    body = {
        "model": NAME,
        "stream": True,
        "options": {"num_ctx": 8192},
        "keep_alive": -1.0,
        "messages": [{"role": "user", "content": "Pick a color."}],
        "tools": [],
        "format": schema,
    }
    lines = lines_of(httpx.post(server.url + "/api/chat", json=body, timeout=60))
    text = "".join(line["message"]["content"] for line in lines)
    assert json.loads(text)["color"] in ("red", "blue")


# -- Zed ----------------------------------------------------------------------------------------------------------
def test_zeds_listing_structs_parse_every_entry(server: ServerThread) -> None:
    for entry in httpx.get(server.url + "/api/tags").json()["models"]:  # LocalModelListing: all fields required
        assert isinstance(entry["name"], str) and isinstance(entry["modified_at"], str)
        assert type(entry["size"]) is int and entry["size"] >= 0 and isinstance(entry["digest"], str)
        details = entry["details"]
        assert all(
            isinstance(details[key], str) for key in ("format", "family", "parameter_size", "quantization_level")
        )
        shown = httpx.post(server.url + "/api/show", json={"model": entry["name"]}).json()
        assert all(isinstance(capability, str) for capability in shown["capabilities"])
        arch = shown["model_info"]["general.architecture"]
        assert type(shown["model_info"][f"{arch}.context_length"]) is int  # read with as_u64
        assert {"tools"} <= set(shown["capabilities"])


def test_zeds_agent_chat_streams_lines_its_delta_struct_takes(server: ServerThread) -> None:
    body = {
        "model": NAME,
        "messages": [
            {"role": "system", "content": "You are Zed's agent."},
            {"role": "user", "content": "read main"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "call_abc", "function": {"name": "read_file", "arguments": {"path": "main.rs"}}}],
                "thinking": None,
            },
            {"role": "tool", "tool_name": "read_file", "content": "fn main() {}"},
            {"role": "assistant", "content": "Done", "tool_calls": [], "thinking": None},
            {"role": "user", "content": "again"},
        ],
        "stream": True,
        "keep_alive": -1,
        "options": {"num_ctx": 4096, "num_predict": None, "stop": [], "temperature": 1.0, "top_p": None},
        "tools": [
            {
                "type": "function",
                "function": {"name": "read_file", "description": "Read", "parameters": {"type": "object"}},
            }
        ],
        "think": None,
    }
    response = httpx.post(server.url + "/api/chat", json={**body, "options": {**body["options"], "num_predict": 6}})
    lines = lines_of(response)
    for line in lines:  # ChatResponseDelta: model, created_at, message{role, content: String}, done
        assert isinstance(line["model"], str) and isinstance(line["created_at"], str) and isinstance(line["done"], bool)
        assert line["message"]["role"] == "assistant" and isinstance(line["message"]["content"], str)
        for call in line["message"].get("tool_calls", []):
            assert isinstance(call["id"], str)  # required since zed#49246
    assert type(lines[-1]["prompt_eval_count"]) is int and lines[-1]["eval_count"] == 6


def test_zeds_edit_prediction_generates_raw_and_whole(server: ServerThread) -> None:
    body = {
        "model": NAME,
        "prompt": "<|fim_prefix|>fn main() {",
        "raw": True,
        "stream": False,
        "options": {"num_predict": 8, "temperature": 0.2, "stop": ["<|endoftext|>"]},
    }
    answer = httpx.post(server.url + "/api/generate", json=body).json()
    assert isinstance(answer["created_at"], str) and isinstance(answer["response"], str)
    assert answer["done"] is True and answer["eval_count"] <= 8


# -- VS Code Copilot ------------------------------------------------------------------------------------------
def _copilot_version_ok(version: str) -> bool:
    """ollamaProvider.ts: "0.0.0" passes; else each dot-part with parseInt (NaN as 0) compared to 0.6.4."""
    if version == "0.0.0":
        return True
    parts = []
    for part in version.split("."):
        digits = "".join(c for c in part[: len(part) - len(part.lstrip("0123456789"))] or "0")
        parts.append(int(digits or 0))
    return parts >= [0, 6, 4]


def test_copilot_discovers_the_model_with_tools_and_the_real_context_then_chats_openai(server: ServerThread) -> None:
    assert _copilot_version_ok(httpx.get(server.url + "/api/version").json()["version"])
    for model in httpx.get(server.url + "/api/tags").json()["models"]:
        shown = httpx.post(server.url + "/api/show", json={"model": model["model"]}).json()
        assert "tools" in shown["capabilities"]  # or Copilot hides the model from agent mode
        info = shown["model_info"]
        context = info.get(f"{info['general.architecture']}.context_length", 32768)
        assert context == 4096  # a slot's context (8192 over 2 slots), not Copilot's 32768 guess nor llama.cpp's stub
        assert info["general.basename"] == "Tiny-LFM2-Test"
    response = httpx.post(
        server.url + "/v1/chat/completions",
        json={"model": NAME, "messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 3,
              "stream_options": {"include_usage": True}},
        headers={"Authorization": "Bearer none"},  # Copilot's key, set or not (no key is configured here)
    )  # fmt: skip
    events = [line for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and json.loads(events[-2][6:])["usage"]["completion_tokens"] == 3


# -- Frigate ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vl_server(server_factory: Callable[..., ServerThread], vl_gguf: Path, mmproj_gguf: Path) -> ServerThread:
    return server_factory(vl_settings(vl_gguf, mmproj_gguf))


def test_frigate_validates_the_model_and_describes_snapshots_with_a_schema(vl_server: ServerThread) -> None:
    name = "tiny-lfm2-vl.gguf:latest"
    shown = httpx.post(vl_server.url + "/api/show", json={"model": name}).json()
    assert isinstance(shown["model_info"], dict)  # without it the client raises and Frigate turns GenAI off
    assert "thinking" not in shown["capabilities"]  # so Frigate sends no think
    assert name in sorted(m["model"] for m in httpx.get(vl_server.url + "/api/tags").json()["models"])
    snapshot = base64.b64encode(image_bytes(64, 48, seed=4)).decode()
    schema = {
        "type": "object",
        "properties": {"title": {"type": "string", "maxLength": 12}, "potential_threat_level": {"type": "integer"}},
        "required": ["title", "potential_threat_level"],
        "additionalProperties": False,
    }
    body = {
        "model": name,
        "stream": False,
        "options": {"temperature": 0.5, "repeat_penalty": 1.05, "presence_penalty": 0.3, "num_predict": 400},
        "format": schema,
        "prompt": "Describe the activity in these frames.",
        "images": [snapshot, snapshot],
    }
    answer = httpx.post(vl_server.url + "/api/generate", json=body, timeout=120).json()
    described = json.loads(answer["response"].strip())
    assert list(described) == ["title", "potential_threat_level"] and isinstance(
        described["potential_threat_level"], int
    )
    assert (answer["done"], answer["done_reason"]) == (True, "stop")
    assert all(type(answer[key]) is int for key in ("eval_count", "prompt_eval_count", "eval_duration"))


def test_frigate_chat_with_tools_is_whole_and_its_tool_results_have_no_name(vl_server: ServerThread) -> None:
    body = {
        "model": "tiny-lfm2-vl.gguf:latest",
        "messages": [
            {"role": "system", "content": "You answer questions about camera events."},
            {"role": "user", "content": "Who was at the door?"},
            {
                "role": "assistant",
                "tool_calls": [{"function": {"name": "search_objects", "arguments": {"label": "person"}}}],
            },
            {"role": "tool", "content": "[]"},
        ],
        "options": {"temperature": 0.5, "repeat_penalty": 1.05, "presence_penalty": 0.3, "num_predict": 6},
        "stream": False,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "search_objects",
                    "description": "Search tracked objects",
                    "parameters": {"type": "object", "properties": {"label": {"type": "string"}}},
                },
            }
        ],
    }
    answer = httpx.post(vl_server.url + "/api/chat", json=body, timeout=60).json()
    assert answer["message"]["role"] == "assistant" and isinstance(answer["message"]["content"], str)
    assert (answer["done"], answer["eval_count"]) == (True, 6) and type(answer["eval_duration"]) is int
