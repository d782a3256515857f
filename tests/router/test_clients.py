"""What clients of a router do, replayed against lfmserve's: Frigate's llama.cpp provider with its vision, embedding
and audio models behind one URL, llama-swap's ``/upstream`` routes, and a greedy stream that must come out of the
router exactly as the model serves it alone."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from lfmserve.client import Client, ListedModel
from lfmserve.errors import LfmError
from lfmserve.settings import Settings
from lfmserve.testing import tiny_reranker, wav_bytes, write_lfm2_gguf
from lfmserve.testing.scripted import ScriptedLlama, write_scripted_gguf
from lfmserve.tui.main import _only_model
from tests.api.test_frigate_provider import EMBEDDING_DIM, FrigateLikeProvider
from tests.api.test_reasoning_budget import ASK
from tests.api.test_reasoning_budget import TEMPLATE as THINKING_TEMPLATE
from tests.conftest import Running, ServerThread
from tests.router.conftest import entries, start_router


@pytest.fixture
def router(idle_router: Running) -> Running:
    """The module's shared router, no model loaded (tests/router/conftest.py): these tests change nothing else."""
    return idle_router


class FrigateModelInfo:
    """The reads of Frigate's llama.cpp provider before it uses a model (``_get_model_info``,
    ``list_model_capabilities``, ``estimate_image_tokens``), as it makes them."""

    def __init__(self, base_url: str, model: str) -> None:
        self.base_url, self.model = base_url, model

    def info(self) -> dict[str, Any]:
        listed = httpx.get(f"{self.base_url}/v1/models", timeout=10).json()["data"]
        entry = next(m for m in listed if self.model in {m.get("id"), *m.get("aliases", [])})
        modalities = entry["architecture"]["input_modalities"]
        args = entry.get("status", {}).get("args", [])
        n_ctx = (entry.get("meta") or {}).get("n_ctx") or (args[args.index("--ctx-size") + 1] if args else None)
        try:
            props = httpx.get(f"{self.base_url}/props", params={"model": self.model}, timeout=60).json()
        except httpx.HTTPError:
            props = httpx.get(f"{self.base_url}/upstream/{self.model}/props", timeout=60).json()
        return {
            "context_size": int(n_ctx),
            "supports_vision": "image" in modalities,
            "supports_audio": "audio" in modalities,
            "supports_tools": "--jinja" in args or props["chat_template_caps"]["supports_tools"],
            "supports_reasoning": "enable_thinking" in props["chat_template"],
        }

    def capabilities(self) -> dict[str, dict[str, bool]]:
        out = {}
        for model in httpx.get(f"{self.base_url}/v1/models", timeout=10).json()["data"]:
            modalities = model["architecture"]["input_modalities"]
            flags = {"supports_vision": "image" in modalities, "supports_transcription": "audio" in modalities}
            for name in [model["id"], *model["aliases"]]:
                out[name] = flags
        return out

    def image_tokens(self, width: int, height: int) -> int:
        picture = io.BytesIO()
        Image.new("RGB", (width, height), (128, 128, 128)).save(picture, format="JPEG", quality=60)
        url = "data:image/jpeg;base64," + base64.b64encode(picture.getvalue()).decode()
        text = {"type": "text", "text": "."}
        baseline = self._prompt_tokens([text])
        return self._prompt_tokens([text, {"type": "image_url", "image_url": {"url": url}}]) - baseline

    def _prompt_tokens(self, content: list[dict[str, Any]]) -> int:
        body = {"model": self.model, "messages": [{"role": "user", "content": content}], "max_tokens": 1}
        reply = httpx.post(f"{self.base_url}/v1/chat/completions", json=body, timeout=60)
        reply.raise_for_status()
        return int(reply.json()["usage"]["prompt_tokens"])


def test_frigate_describes_embeds_and_transcribes_with_three_models_behind_one_url(router: Running) -> None:
    vision = FrigateModelInfo(router.url, "vision")
    assert vision.info() == {
        "context_size": 2048,
        "supports_vision": True,
        "supports_audio": False,
        "supports_tools": True,
        "supports_reasoning": False,
    }
    assert FrigateModelInfo(router.url, "audio").info()["supports_audio"] is True
    plain = {"supports_vision": False, "supports_transcription": False}
    assert vision.capabilities() == {
        "audio": {"supports_vision": False, "supports_transcription": True},
        "embed": plain,
        "embedder": plain,
        "text": plain,
        "chat": plain,
        "lfm-text": plain,
        "vision": {"supports_vision": True, "supports_transcription": False},
    }
    # The projector facts of docs/testing.md: one 256x256 tile is 64 tokens and its two wrappers.
    assert vision.image_tokens(256, 256) == 66
    assert vision.image_tokens(512, 512) == 258

    vectors = FrigateLikeProvider(router.url, "embedder").embed(["a person at the front door", "a parcel"], [])
    assert [v.shape for v in vectors] == [(EMBEDDING_DIM,)] * 2
    assert all(abs(np.linalg.norm(v[:64]) - 1) < 1e-5 and not v[64:].any() for v in vectors)  # 64 wide, padded

    transcript = FrigateLikeProvider(router.url, "audio").transcribe(wav_bytes(3.0, hz=220.0), language="en")
    assert transcript is None or isinstance(transcript, str)  # random weights: any text
    form = {"model": "audio", "response_format": "json", "language": "en", "temperature": "0"}
    files = {"file": ("audio.wav", wav_bytes(3.0, hz=220.0), "audio/wav")}
    usage = httpx.post(router.url + "/v1/audio/transcriptions", data=form, files=files, timeout=120).json()["usage"]
    prompt = [{"role": "system", "content": "Perform ASR."}, {"role": "user", "content": " (language: en)"}]
    text_only = httpx.post(
        router.url + "/v1/chat/completions/input_tokens", json={"model": "audio", "messages": prompt}, timeout=60
    ).json()
    assert usage["input_tokens"] == text_only["input_tokens"] + 38  # 3 s of audio (docs/testing.md)
    statuses = {name: entry["status"]["value"] for name, entry in entries(router).items()}
    assert statuses == {"audio": "loaded", "embed": "loaded", "text": "unloaded", "vision": "loaded"}


def test_llama_swaps_upstream_routes_reach_the_model_by_name(router: Running) -> None:
    props = httpx.get(router.url + "/upstream/vision/props", timeout=60)
    assert props.status_code == 200
    assert (props.json()["model_alias"], props.json()["modalities"]) == (
        "vision",
        {"vision": True, "audio": False, "video": True},
    )
    bare = httpx.get(router.url + "/upstream/vision", timeout=10)
    assert (bare.status_code, bare.headers["location"]) == (301, "/upstream/vision/")
    unknown = httpx.get(router.url + "/upstream/nope/props", timeout=10)
    assert (unknown.status_code, unknown.json()["error"]["message"]) == (404, "model not found")
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}  # no model: the path names it
    reply = httpx.post(router.url + "/upstream/chat/v1/chat/completions", json=body, timeout=60)
    assert (reply.status_code, reply.json()["model"]) == (200, "text")
    running = httpx.get(router.url + "/running", timeout=10).json()["running"]
    assert sorted((r["model"], r["state"]) for r in running) == [("text", "ready"), ("vision", "ready")]
    assert httpx.get(router.url + "/unload", timeout=30).text == "OK"


def _greedy_stream(url: str, model: str | None) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Tell me about the sea."}],
        "temperature": 0,
        "max_tokens": 24,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if model:
        body["model"] = model
    text, usage = "", {}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or usage
                for choice in chunk["choices"]:
                    text += choice["delta"].get("content") or ""
    return text, usage


def test_a_greedy_stream_through_the_router_is_the_models_own(
    router: Running, router_models: Path, server_factory: Callable[..., ServerThread]
) -> None:
    direct = server_factory(
        Settings.of(model=str(router_models / "models" / "text.gguf"), ctx_size=2048, parallel=1, threads=1)
    )
    routed_text, routed_usage = _greedy_stream(router.url, "chat")
    direct_text, direct_usage = _greedy_stream(direct.url, None)
    assert routed_usage["completion_tokens"] == direct_usage["completion_tokens"] == 24
    assert routed_text == direct_text
    assert routed_usage["prompt_tokens"] == direct_usage["prompt_tokens"]


def test_the_client_lists_every_model_without_loading_any(router: Running) -> None:
    with Client(router.url) as client:
        listed = client.models()
    assert listed == [
        ListedModel(id="audio", aliases=(), status="unloaded", vision=False, audio=True, n_ctx=2048),
        ListedModel(id="embed", aliases=("embedder",), status="unloaded", vision=False, audio=False, n_ctx=512),
        ListedModel(id="text", aliases=("chat", "lfm-text"), status="unloaded", vision=False, audio=False, n_ctx=2048),
        ListedModel(id="vision", aliases=(), status="unloaded", vision=True, audio=False, n_ctx=2048),
    ]
    assert {entry["status"]["value"] for entry in entries(router).values()} == {"unloaded"}


def test_the_terminal_chat_asks_which_of_a_routers_models_to_open(router: Running) -> None:
    with pytest.raises(LfmError) as refused:
        _only_model(router.url, None)
    assert refused.value.message == (
        f"{router.url} is a router serving several models; choose one with --model NAME (audio, embed, text, vision)"
    )


def test_every_api_family_reaches_its_model_through_the_router(
    running: list[Running], router_models: Path, tmp_path: Path
) -> None:
    """One request per route family, each naming its model where that family names it; all answered by the child
    of the model named."""
    reranker = write_lfm2_gguf(tmp_path / "reranker.gguf", tiny_reranker(seed=3))
    preset = tmp_path / "preset.ini"
    preset.write_text(
        (router_models / "preset.ini").read_text() + f"\n[ranker]\nmodel = {reranker}\nreranking = true\n"
    )
    router = start_router(running, router_models, "--metrics", preset=preset)
    hi = [{"role": "user", "content": "hi"}]
    posts: dict[str, dict[str, Any]] = {
        "/v1/chat/completions": {"model": "chat", "messages": hi, "max_tokens": 2},
        "/v1/completions": {"model": "chat", "prompt": "hi", "max_tokens": 2},
        "/completion": {"model": "chat", "prompt": "hi", "n_predict": 2},
        "/v1/messages": {"model": "chat", "messages": hi, "max_tokens": 2},
        "/v1/messages/count_tokens": {"model": "chat", "messages": hi},
        "/v1/responses": {"model": "chat", "input": "hi", "max_output_tokens": 2},
        "/tokenize": {"model": "chat", "content": "hi"},
        "/detokenize": {"model": "chat", "tokens": [1]},
        "/apply-template": {"model": "chat", "messages": hi},
        "/v1/embeddings": {"model": "embedder", "input": "hi"},
        "/rerank": {"model": "ranker", "query": "sea", "documents": ["waves", "sand"]},
    }
    for path, body in posts.items():
        reply = httpx.post(router.url + path, json=body, timeout=60)
        assert reply.status_code == 200, (path, reply.text)
    assert httpx.post(router.url + "/v1/responses", json=posts["/v1/responses"], timeout=60).json()["model"] == "text"
    control = {"model": "chat", "id": "chatcmpl-done", "action": "reasoning_end"}  # the child's answer, passed on
    ended = httpx.post(router.url + "/v1/chat/completions/control", json=control, timeout=60).json()
    assert ended == {"success": False, "message": "no active completion for this id"}
    ranked = httpx.post(router.url + "/rerank", json=posts["/rerank"], timeout=60).json()["results"]
    assert sorted(r["index"] for r in ranked) == [0, 1]
    slots = httpx.get(router.url + "/slots", params={"model": "chat"}, timeout=10)
    assert (slots.status_code, len(slots.json())) == (200, 1)
    metrics = httpx.get(router.url + "/metrics", params={"model": "chat"}, timeout=10)
    assert metrics.status_code == 200 and "llamacpp:prompt_tokens_total" in metrics.text
    statuses = {name: entry["status"]["value"] for name, entry in entries(router).items()}
    assert statuses == {
        "audio": "unloaded",
        "embed": "loaded",
        "ranker": "loaded",
        "text": "loaded",
        "vision": "unloaded",
    }


def test_a_thinking_streamed_through_the_router_is_ended_through_it(
    running: list[Running], router_models: Path, tmp_path: Path
) -> None:
    """``reasoning_control`` through the router: the control names the model, and the router passes it to the child
    that runs the completion. The scripted model thinks ``little bright`` for ever (the template opens the
    thinking, and ``--context-shift`` lets it go on); from the forced end of the thinking on, it answers with the
    same cycle."""
    cycle = ("little", "bright")
    models = tmp_path / "models"
    models.mkdir()
    write_scripted_gguf(models / "thinker.gguf", ScriptedLlama(words=cycle, name="Thinker"))
    template = tmp_path / "thinking.jinja"
    template.write_text(THINKING_TEMPLATE)
    preset = tmp_path / "preset.ini"
    preset.write_text(f"[thinker]\nchat-template-file = {template}\nctx-size = 512\ncontext-shift = true\n")
    router = start_router(running, router_models, "--models-dir", str(models), preset=preset)
    body = {"model": "thinker", "messages": ASK, "stream": True, "temperature": 0, "top_k": 1}
    reasoning, content, answer = "", "", None
    request = {**body, "reasoning_control": True}
    with httpx.stream("POST", router.url + "/v1/chat/completions", json=request, timeout=120) as reply:  # a load first
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choice = chunk["choices"][0] if chunk["choices"] else {}
            reasoning += choice.get("delta", {}).get("reasoning_content") or ""
            content += choice.get("delta", {}).get("content") or ""
            if reasoning and answer is None:
                control = {"model": "thinker", "id": chunk["id"], "action": "reasoning_end"}
                answer = httpx.post(router.url + "/v1/chat/completions/control", json=control, timeout=60)
            if len(content.split()) >= 4:
                break  # it would answer for ever: leaving ends the completion
    assert answer is not None and (answer.status_code, answer.json()) == (200, {"success": True})
    thought, answered = reasoning.split(), content.split()
    assert thought == [cycle[i % 2] for i in range(len(thought))] and thought
    assert answered == [cycle[i % 2] for i in range(len(answered))] and answered
    assert "</think>" not in reasoning + content
