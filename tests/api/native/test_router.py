"""llama-server's own routes over real loopback HTTP: /props, /completion, /tokenize, /apply-template."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from lfmserve.settings import Settings
from lfmserve.testing import LFM2_CHAT_TEMPLATE, TinyLfm2, write_lfm2_gguf
from tests.conftest import TIMINGS_KEYS, ServerThread, fixture_template, post, sse_events


def test_props_report_defaults_slots_template_and_model(tiny_server: ServerThread) -> None:
    props = httpx.get(tiny_server.url + "/props").json()
    assert props.pop("model_path").endswith("/tiny-lfm2.gguf")
    assert props.pop("chat_template") == LFM2_CHAT_TEMPLATE
    assert props.pop("build_info") == "llama-cpp-python 0.3.36"
    settings = props.pop("default_generation_settings")
    assert settings["n_ctx"] == 512 and settings["params"]["n_predict"] == settings["params"]["max_tokens"] == -1
    assert props.pop("sampling_sources")["temperature"] == "LFM family table (LFM2 text, LFM2.5-JP)"
    marker = props.pop("media_marker")
    assert re.fullmatch(r"<__media_[0-9a-f]{32}__>", marker)  # random per process: a client cannot type it
    assert sorted(props.pop("memory")) == [  # its figures: test_props.py
        "anonymous", "compute", "file_backed", "kv_cache", "output", "pss", "recurrent_state", "resident",
        "weights", "weights_released", "weights_repacked",
    ]  # fmt: skip
    model = props.pop("model")
    assert model.pop("n_params") > 0 and model.pop("size") > 0
    assert model == {
        "architecture": "lfm2",
        "name": "Tiny-LFM2-Test",
        "description": model["description"],
        "n_ctx_train": 4096,
        "n_vocab": 475,
        "vocab_type": "BPE",
        "is_hybrid": True,
        "is_recurrent": False,
        "n_swa": 0,
    }
    assert props == {
        "lfm_family": "LFM2 text, LFM2.5-JP",
        "total_slots": 4,
        "model_alias": "tiny-lfm2.gguf",
        "modalities": {"vision": False, "audio": False, "video": False},
        "chat_template_caps": {
            "supports_string_content": True,
            "supports_typed_content": False,
            "supports_system_role": True,
            "supports_tools": True,
            "supports_tool_calls": False,
            "supports_parallel_tool_calls": False,
            "supports_preserve_reasoning": False,
        },
        "bos_token": "<|startoftext|>",
        "eos_token": "<|im_end|>",
        "is_sleeping": False,
        "ui_settings": {},
    }


@pytest.fixture(scope="module")
def named_models(models_dir: Path) -> dict[str, Path]:
    return {
        "instruct": write_lfm2_gguf(
            models_dir / "instruct.gguf",
            TinyLfm2(seed=5, name="LFM2.5 1.2B Instruct", basename="LFM2.5", size_label="1.2B"),
        ),
        "keys": write_lfm2_gguf(
            models_dir / "keys.gguf", TinyLfm2(seed=5, name="LFM2.5 1.2B Instruct", sampling={"temp": 0.7, "top_k": 11})
        ),
    }


def test_props_show_lfm_family_defaults_and_gguf_keys_override_them(
    server_factory: Callable[..., ServerThread], named_models: dict[str, Path]
) -> None:
    instruct = server_factory(Settings.of(model=str(named_models["instruct"]), ctx_size=512, parallel=1))
    params = httpx.get(instruct.url + "/props").json()["default_generation_settings"]["params"]
    assert (params["temperature"], params["top_k"], params["top_p"], params["min_p"], params["repeat_penalty"]) == (
        0.1,
        50,
        1.0,
        0.0,
        1.05,
    )
    keys = server_factory(Settings.of(model=str(named_models["keys"]), ctx_size=512, parallel=1, min_p=0.2))
    props = httpx.get(keys.url + "/props").json()
    params = props["default_generation_settings"]["params"]
    assert (params["temperature"], params["top_k"], params["repeat_penalty"], params["min_p"]) == (0.7, 11, 1.05, 0.2)
    assert props["sampling_sources"]["temperature"] == "GGUF general.sampling"
    assert props["sampling_sources"]["min_p"] == "command line"


def test_native_completion_and_its_stream_without_done(tiny_server: ServerThread) -> None:
    body = {"prompt": "Once upon a time", "n_predict": 8, "temperature": 0}
    data = post(tiny_server, "/completion", body).json()
    assert data["stop"] is True and data["tokens_predicted"] == 8 and data["stop_type"] == "limit"
    tokens = post(tiny_server, "/tokenize", {"content": "Once upon a time", "add_special": True}).json()["tokens"]
    assert data["prompt"] == "<|startoftext|>Once upon a time" and data["tokens_evaluated"] == len(tokens)
    assert set(data["timings"]) == TIMINGS_KEYS and "generation_settings" in data
    events = sse_events(tiny_server, "/completion", {**body, "stream": True})
    assert "[DONE]" not in events
    chunks = [json.loads(e) for e in events]
    assert all(c["stop"] is False for c in chunks[:-1]) and chunks[-1]["stop"] is True
    assert "".join(c["content"] for c in chunks) == data["content"]
    by_ids = post(tiny_server, "/completion", {**body, "prompt": tokens}).json()
    assert by_ids["content"] == data["content"]


def test_tokenize_detokenize_apply_template(tiny_server: ServerThread) -> None:
    tokens = post(tiny_server, "/tokenize", {"content": "<|im_start|>Hi"}).json()["tokens"]
    assert tokens[0] == 6 and post(tiny_server, "/detokenize", {"tokens": tokens}).json() == {
        "content": "<|im_start|>Hi"
    }
    assert post(tiny_server, "/tokenize", {"content": "Hi", "add_special": True}).json()["tokens"][0] == 1
    literal = post(tiny_server, "/tokenize", {"content": "<|im_start|>", "parse_special": False}).json()["tokens"]
    assert 6 not in literal and len(literal) > 1
    pieces = post(tiny_server, "/tokenize", {"content": "<|im_end|>x", "with_pieces": True}).json()["tokens"]
    assert pieces[0] == {"id": 7, "piece": "<|im_end|>"}
    prompt = post(tiny_server, "/apply-template", {"messages": [{"role": "user", "content": "Hi"}]}).json()["prompt"]
    assert prompt == "<|startoftext|><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_fixture_template_via_chat_template_file(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    server = server_factory(
        Settings.of(
            model=str(tiny_gguf),
            ctx_size=512,
            parallel=1,
            chat_template_file=str(fixture_template("lfm2.5-instruct.jinja")),
        )
    )
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    prompt = post(server, "/apply-template", {"messages": [{"role": "user", "content": "Hi"}], "tools": tools}).json()
    assert prompt["prompt"] == (
        '<|startoftext|><|im_start|>system\nList of tools: [{"type": "function", "function": '
        '{"name": "f", "parameters": {"type": "object"}}}]<|im_end|>\n<|im_start|>user\nHi'
        "<|im_end|>\n<|im_start|>assistant\n"
    )


def test_no_jinja_uses_llama_cpp_builtin_formats(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    server = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, jinja=False))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    prompt = post(server, "/apply-template", {"messages": messages}).json()["prompt"]
    # llama.cpp recognises the LFM template as ChatML; its built-in ChatML adds no BOS text
    assert prompt == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    tools = [{"type": "function", "function": {"name": "f"}}]
    response = post(server, "/v1/chat/completions", {"messages": messages, "tools": tools})
    assert response.status_code == 400 and response.json()["error"]["message"] == "tools param requires --jinja flag"
    assert post(server, "/v1/chat/completions", {"messages": messages, "max_tokens": 2}).status_code == 200


def test_return_tokens_fills_the_final_objects_tokens(tiny_server: ServerThread) -> None:
    """llama-server leaves ``tokens`` empty unless asked; a stream's chunks always carry theirs."""
    body = {"prompt": "Once upon a time", "n_predict": 6, "temperature": 0}
    assert post(tiny_server, "/completion", body).json()["tokens"] == []
    data = post(tiny_server, "/completion", {**body, "return_tokens": True}).json()
    chunks = [json.loads(e) for e in sse_events(tiny_server, "/completion", {**body, "stream": True})]
    streamed = [t for c in chunks[:-1] for t in c["tokens"]]
    assert len(data["tokens"]) == 6 and data["tokens"] == streamed and chunks[-1]["tokens"] == []
    assert post(tiny_server, "/detokenize", {"tokens": data["tokens"]}).json()["content"] == data["content"]


def test_response_fields_keep_only_the_named_paths(tiny_server: ServerThread) -> None:
    body = {"prompt": "Hi", "n_predict": 3, "response_fields": ["content", "generation_settings/n_predict", "no/such"]}
    data = post(tiny_server, "/completion", body).json()
    assert set(data) == {"content", "generation_settings/n_predict"} and data["generation_settings/n_predict"] == 3


def test_ignore_eos_lists_the_end_of_generation_bans_in_the_settings(tiny_server: ServerThread) -> None:
    """As llama-server: -inf (JSON null) for each end-of-generation token (2 and 7), after the request's own."""
    body = {"prompt": "Hi", "n_predict": 2, "logit_bias": [[100, 1.5]]}
    plain = post(tiny_server, "/completion", body).json()["generation_settings"]
    assert plain["logit_bias"] == [{"bias": 1.5, "token": 100}] and plain["ignore_eos"] is False
    settings = post(tiny_server, "/completion", {**body, "ignore_eos": True}).json()["generation_settings"]
    assert settings["logit_bias"] == [
        {"bias": 1.5, "token": 100},
        {"bias": None, "token": 2},
        {"bias": None, "token": 7},
    ]


def test_post_sampling_probs_are_the_chains_probabilities(tiny_server: ServerThread) -> None:
    body = {"prompt": "Once upon a time", "n_predict": 4, "n_probs": 5, "post_sampling_probs": True}
    greedy = post(tiny_server, "/completion", {**body, "temperature": 0}).json()
    assert greedy["generation_settings"]["post_sampling_probs"] is True
    for step in greedy["completion_probabilities"]:  # greedy: the chosen token alone, with probability 1
        assert "logprob" not in step and step["prob"] == 1.0
        assert step["top_probs"] == [{k: step[k] for k in ("id", "token", "prob", "bytes")}]
    sampled = post(tiny_server, "/completion", {**body, "temperature": 1.0, "top_k": 3, "seed": 5}).json()
    steps = sampled["completion_probabilities"]
    assert len(steps) == 4
    for step in steps:
        probs = [p["prob"] for p in step["top_probs"]]
        assert 1 <= len(probs) <= 3 and probs == sorted(probs, reverse=True) and sum(probs) == pytest.approx(1.0)
        assert step["prob"] == next(p["prob"] for p in step["top_probs"] if p["id"] == step["id"])


def test_detokenize_joins_the_pieces_as_they_are(tiny_server: ServerThread) -> None:
    """llama-server's /detokenize does not clean up spaces: "France ?" comes back as it was sent."""
    for text in ("What is the capital of France ?", "unicode 媽 and emoji 🤗"):
        tokens = post(tiny_server, "/tokenize", {"content": text}).json()["tokens"]
        assert post(tiny_server, "/detokenize", {"tokens": tokens}).json() == {"content": text}
