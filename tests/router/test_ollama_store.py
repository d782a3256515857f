"""Ollama's model store as a source of the router: a store written as Ollama writes it (manifests and
content-addressed blobs, tiny models), listed under Ollama's names beside ``--models-dir`` and a preset, served in
place from its blobs with its params, system, messages, adapter and projector layers, its broken manifests listed
failed with the reason, and found by Ollama's short names through Ollama's own client."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from lfmserve.router import ollama_store
from lfmserve.router.catalog import build_catalog
from lfmserve.router.child import child_argv
from lfmserve.router.ollama_store import display_name, store_folder
from lfmserve.router.registry import Registry
from lfmserve.settings import Settings
from lfmserve.testing import TinyLfm2, TinyProjector, write_lfm2_gguf, write_mmproj_gguf
from lfmserve.testing.media import image_bytes
from lfmserve.testing.ollama import (
    ADAPTER,
    LICENSE,
    MESSAGES,
    MODEL,
    PARAMS,
    PROJECTOR,
    SYSTEM,
    TEMPLATE,
    TENSOR,
    OllamaStore,
)
from lfmserve.testing.scripted import STORY_MOE, write_scripted_gguf, write_scripted_lora
from tests.conftest import LFMSERVE, Running, wait_healthy
from tests.router.conftest import CHILD_FLAGS, entries

CONFIG = {
    "model_format": "gguf",
    "model_family": "lfm2",
    "model_families": ["lfm2"],
    "model_type": "350M",
    "file_type": "Q4_K_M",
}
PARAMS_LAYER = {
    "temperature": 0.25,
    "top_k": 7,
    "repeat_penalty": 1.1,
    "stop": ["<|im_end|>", "END"],
    "num_ctx": 512,
    "num_gpu": 99,
}
HISTORY = [{"role": "user", "content": "Who are you?"}, {"role": "assistant", "content": "A tiny model."}]
#: The prompt of a chat saying "Hello" to lfm2:latest: its system and messages layers, then the chat.
PROMPT = (
    "<|startoftext|><|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWho are you?<|im_end|>\n"
    "<|im_start|>assistant\nA tiny model.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
)
VL = "hf.co/LiquidAI/LFM2-VL-450M-GGUF:Q4_0"
HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``store/`` (Ollama's: lfm2, a scripted model with its LoRA adapter, a vision model with its projector, a
    tensor-layer model, one whose blob is missing, and ``text:latest``), ``models/text.gguf`` and ``preset.ini``."""
    root = tmp_path_factory.mktemp("ollama")
    work = root / "work"
    work.mkdir()
    text = write_lfm2_gguf(work / "text.gguf", TinyLfm2(seed=1)).read_bytes()
    vision = write_lfm2_gguf(work / "vl.gguf", TinyLfm2(seed=1, vision_tokens=True, name="Tiny-vision")).read_bytes()
    projector = write_mmproj_gguf(work / "mmproj.gguf", TinyProjector(kind="vision")).read_bytes()
    store = OllamaStore(root / "store")
    layers = [
        (MODEL, text),
        (TEMPLATE, b"{{ .Prompt }}"),
        (SYSTEM, b"You are terse."),
        (PARAMS, json.dumps(PARAMS_LAYER).encode()),
        (MESSAGES, json.dumps(HISTORY).encode()),
        (LICENSE, b"LFM Open License"),
    ]
    store.add("registry.ollama.ai/library/lfm2/latest", layers, CONFIG)
    scripted = write_scripted_gguf(work / "moe.gguf", STORY_MOE).read_bytes()
    lora = write_scripted_lora(work / "lora.gguf", STORY_MOE).read_bytes()
    custom = [(MODEL, scripted), (ADAPTER, lora), (PARAMS, b'{"num_ctx": 4096}')]
    store.add("registry.ollama.ai/someone/custom/v1", custom, {"model_family": "llama", "file_type": "F32"})
    store.add("hf.co/LiquidAI/LFM2-VL-450M-GGUF/Q4_0", [(MODEL, vision), (PROJECTOR, projector)], CONFIG)
    store.add("registry.ollama.ai/library/tensors/latest", [(TENSOR, b"\0" * 16)], {"model_format": "safetensors"})
    _, blobs = store.add("registry.ollama.ai/library/missing/latest", [(MODEL, text + b"\0")], CONFIG)
    blobs[0].unlink()
    store.add("registry.ollama.ai/library/text/latest", [(MODEL, text)], CONFIG)
    (root / "models").mkdir()
    shutil.copy(work / "text.gguf", root / "models" / "text.gguf")
    (root / "preset.ini").write_text("version = 1\n\n[someone/custom:v1]\nctx-size = 1024\n")
    return root


def _blob(layout: Path, data: bytes) -> str:
    return str(layout / "store" / "blobs" / f"sha256-{hashlib.sha256(data).hexdigest()}")


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def router(layout: Path) -> Iterator[Running]:
    """``lfmserve --models-dir models --models-preset preset.ini`` with ``OLLAMA_MODELS`` naming the store."""
    assert LFMSERVE is not None
    argv = [LFMSERVE, "--models-dir", str(layout / "models"), "--models-preset", str(layout / "preset.ini")]
    server = Running([*argv, *CHILD_FLAGS], env={"OLLAMA_MODELS": str(layout / "store"), "HOME": str(layout)})
    try:
        wait_healthy(server.url, server.process)
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(router: Running) -> Iterator[ollama.Client]:
    with ollama.Client(host=router.url) as client:
        yield client


def _post(router: Running, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(router.url + path, json=body, timeout=120)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


# -- the router over the store ----------------------------------------------------------------------------------


def test_the_store_is_listed_beside_the_folder_and_the_preset_and_every_list_agrees(
    router: Running, layout: Path
) -> None:
    listed = entries(router)
    assert {name: entry["source"] for name, entry in listed.items()} == {
        VL: "ollama",
        "lfm2:latest": "ollama",
        "missing:latest": "ollama",
        "someone/custom:v1": "preset",  # its section adds ctx-size
        "tensors:latest": "ollama",
        "text": "models_dir",  # Ollama's text:latest is the same name in Ollama's terms: the folder keeps it
    }
    assert listed["text"]["status"]["args"][listed["text"]["status"]["args"].index("--model") + 1] == str(
        layout / "models" / "text.gguf"
    )
    assert "Ollama's model text:latest is left out: the router already has a model named text" in router.log()
    tags = {entry["name"]: entry for entry in httpx.get(router.url + "/api/tags").json()["models"]}
    assert sorted(tags) == [VL, "lfm2:latest", "missing:latest", "someone/custom:v1", "tensors:latest", "text:latest"]
    manifest = layout / "store" / "manifests" / "registry.ollama.ai" / "library" / "lfm2" / "latest"
    written = json.loads(manifest.read_text())
    lfm2 = tags["lfm2:latest"]
    assert lfm2["digest"] == hashlib.sha256(manifest.read_bytes()).hexdigest()  # Ollama's: the manifest's hash
    assert lfm2["size"] == written["config"]["size"] + sum(layer["size"] for layer in written["layers"])
    assert lfm2["details"] == {"parent_model": "", **_details(CONFIG)}
    assert tags["someone/custom:v1"]["details"] == {
        "parent_model": "",
        "format": "gguf",  # what the config leaves out is read from the GGUF
        "family": "llama",
        "families": ["llama"],
        "parameter_size": "0M",  # 187 thousand parameters
        "quantization_level": "F32",
    }
    shown = _post(router, "/api/show", {"model": "lfm2"})
    assert shown["details"] == lfm2["details"] and shown["model_info"]["lfm2.context_length"] == 512
    assert (shown["system"], shown["license"], shown["messages"]) == ("You are terse.", "LFM Open License", HISTORY)
    assert shown["parameters"] == "\n".join(
        [
            f"{'num_ctx':<30} 512",
            f"{'num_gpu':<30} 99",
            f"{'repeat_penalty':<30} 1.1",
            f'{"stop":<30} "<|im_end|>"',
            f'{"stop":<30} "END"',
            f"{'temperature':<30} 0.25",
            f"{'top_k':<30} 7",
        ]
    )
    assert listed["lfm2:latest"]["meta"] == {"n_ctx": 512, "n_ctx_train": 4096}  # num_ctx, before any load


def _details(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": config["model_format"],
        "family": config["model_family"],
        "families": config["model_families"],
        "parameter_size": config["model_type"],
        "quantization_level": config["file_type"],
    }


def test_a_short_name_is_answered_through_ollamas_client_from_the_blob_in_place(
    router: Running, client: ollama.Client, layout: Path
) -> None:
    before = _files(layout / "store")
    answer = client.chat(model="lfm2", messages=HELLO, options={"num_predict": 3})
    assert (answer.model, answer.done_reason, answer.eval_count) == ("lfm2", "length", 3)
    model_blob = _blob(layout, (layout / "work" / "text.gguf").read_bytes())
    args = entries(router)["lfm2:latest"]["status"]["args"]
    assert args[args.index("--model") + 1] == model_blob
    props = httpx.get(router.url + "/props", params={"model": "lfm2"}).json()
    assert props["model_path"] == model_blob
    assert [m.model for m in client.ps().models] == ["lfm2:latest"]
    generated = client.generate(model="lfm2", prompt="Hi", options={"num_predict": 1})
    assert (generated.model, generated.done_reason, generated.eval_count) == ("lfm2", "length", 1)
    assert client.generate(model="registry.ollama.ai/library/lfm2:latest", prompt="Hi", options={"num_predict": 1}).done
    assert _files(layout / "store") == before  # read in place: nothing copied, written or touched


def test_params_system_and_messages_layers_are_the_models_defaults_in_every_api(router: Running) -> None:
    params = httpx.get(router.url + "/props", params={"model": "lfm2:latest"}).json()["default_generation_settings"]
    assert params["n_ctx"] == 512  # num_ctx: a request's context (-np 1)
    chosen = {key: params["params"][key] for key in ("temperature", "top_k", "repeat_penalty", "stop")}
    assert chosen == {"temperature": 0.25, "top_k": 7, "repeat_penalty": 1.1, "stop": ["<|im_end|>", "END"]}
    assert _post(router, "/apply-template", {"model": "lfm2", "messages": HELLO})["prompt"] == PROMPT
    own_system = [{"role": "system", "content": "Be loud."}, *HELLO]
    assert _post(router, "/apply-template", {"model": "lfm2", "messages": own_system})["prompt"] == (
        "<|startoftext|><|im_start|>user\nWho are you?<|im_end|>\n<|im_start|>assistant\nA tiny model.<|im_end|>\n"
        "<|im_start|>system\nBe loud.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    )  # Ollama's order: the model's messages, then the request's own, its system included
    completion = {"model": "lfm2", "prompt": "Hi", "n_predict": 1}
    assert _post(router, "/completion", completion)["generation_settings"]["stop"] == ["<|im_end|>", "END"]
    assert _post(router, "/completion", completion | {"stop": ["x"]})["generation_settings"]["stop"] == ["x"]
    n_prompt = len(_post(router, "/tokenize", {"model": "lfm2", "content": PROMPT, "parse_special": True})["tokens"])
    openai = _post(router, "/v1/chat/completions", {"model": "lfm2", "messages": HELLO, "max_tokens": 1})
    anthropic = _post(router, "/v1/messages", {"model": "lfm2", "messages": HELLO, "max_tokens": 1})
    responses = _post(router, "/v1/responses", {"model": "lfm2", "input": "Hello", "max_output_tokens": 1})
    chat = _post(
        router, "/api/chat", {"model": "lfm2", "messages": HELLO, "stream": False, "options": {"num_predict": 1}}
    )
    counts = [
        openai["usage"]["prompt_tokens"],
        anthropic["usage"]["input_tokens"] + anthropic["usage"]["cache_read_input_tokens"],
        responses["usage"]["input_tokens"],
        chat["prompt_eval_count"],
    ]
    assert counts == [n_prompt] * 4
    loud = "Be loud, and say everything twice over with exclamation marks."
    generated = {"model": "lfm2", "prompt": "Hello", "system": loud, "stream": False, "options": {"num_predict": 1}}
    expected = PROMPT.replace("You are terse.", loud)  # generate: its system, the model's messages, the prompt
    n_expected = len(
        _post(router, "/tokenize", {"model": "lfm2", "content": expected, "parse_special": True})["tokens"]
    )
    assert _post(router, "/api/generate", generated)["prompt_eval_count"] == n_expected != n_prompt


def test_an_adapter_layer_is_applied_and_a_preset_key_outweighs_num_ctx(router: Running, layout: Path) -> None:
    name = "someone/custom:v1"
    body = {"model": name, "prompt": "Look in thy glass", "n_predict": 5, "temperature": 0}
    assert _post(router, "/completion", body)["content"] == " sun eye love glass sun"  # the LoRA's words at scale 1
    adapters = httpx.get(router.url + "/lora-adapters", params={"model": name}).json()
    lora = _blob(layout, (layout / "work" / "lora.gguf").read_bytes())
    assert adapters == [{"id": 0, "path": lora, "scale": 1.0, "task_name": "", "prompt_prefix": ""}]
    props = httpx.get(router.url + "/props", params={"model": name}).json()
    assert props["default_generation_settings"]["n_ctx"] == 1024  # the preset's ctx-size, not num_ctx 4096


def test_the_projector_layer_is_attached(router: Running, client: ollama.Client) -> None:
    assert client.show(VL).capabilities == ["completion", "tools", "vision"]
    image = image_bytes(64, 64, seed=1, format="PNG")
    ask = [{"role": "user", "content": "What is this?"}]
    plain = client.chat(model=VL, messages=ask, options={"num_predict": 2, "temperature": 0})
    seen = client.chat(model=VL, messages=[{**ask[0], "images": [image]}], options={"num_predict": 2, "temperature": 0})
    assert (seen.done_reason, seen.eval_count) == ("length", 2)
    assert seen.prompt_eval_count is not None and plain.prompt_eval_count is not None
    assert seen.prompt_eval_count > plain.prompt_eval_count  # the image's tokens, from the projector blob


def test_a_store_model_is_never_deleted_or_pulled_by_lfmserve(
    router: Running, client: ollama.Client, layout: Path
) -> None:
    before = _files(layout / "store")
    for name, listed in ((VL, VL), ("lfm2", "lfm2:latest")):  # a hub model of the store, and a library one
        with pytest.raises(ollama.ResponseError) as refused:
            client.delete(name)
        assert (refused.value.status_code, refused.value.error) == (
            400,
            f"model '{listed}' is in Ollama's store, which lfmserve never changes: remove it with `ollama rm {listed}`",
        )
    assert client.pull(VL).status == "success"  # the store has it: nothing is fetched
    assert _files(layout / "store") == before


def test_broken_manifests_are_listed_failed_with_the_reason_and_never_started(
    router: Running, client: ollama.Client, layout: Path
) -> None:
    missing = _blob(layout, (layout / "work" / "text.gguf").read_bytes() + b"\0")
    reasons = {
        "missing:latest": f"its model blob {missing} is missing",
        "tensors:latest": "its weights are tensor layers of Ollama's own engine "
        "(application/vnd.ollama.image.tensor), which llama.cpp cannot load",
    }
    listed = entries(router)
    for name, reason in reasons.items():
        status = listed[name]["status"]
        assert {k: status[k] for k in ("value", "failed", "exit_code", "error")} == {
            "value": "unloaded",
            "failed": True,
            "exit_code": 1,
            "error": reason,
        }
    refused = httpx.post(router.url + "/v1/chat/completions", json={"model": "missing", "messages": HELLO}, timeout=120)
    assert (refused.status_code, refused.json()["error"]["message"]) == (
        500,
        f"model name=missing:latest failed to load: {reasons['missing:latest']}",
    )
    with pytest.raises(ollama.ResponseError) as tensors:
        client.chat(model="tensors", messages=HELLO)
    assert tensors.value.error == f"model name=tensors:latest failed to load: {reasons['tensors:latest']}"
    loaded = httpx.post(router.url + "/models/load", json={"model": "tensors:latest"}, timeout=120)
    assert (loaded.status_code, loaded.json()["error"]["message"]) == (500, tensors.value.error)
    assert client.chat(model="lfm2", messages=HELLO, options={"num_predict": 1}).done  # the others serve on
    assert router.process.poll() is None


# -- the catalog, without a process ----------------------------------------------------------------------------


def _settings(*argv: str, **environ: str) -> Settings:
    return Settings.from_argv(list(argv), environ=environ)


def test_names_resolve_as_ollama_resolves_them(layout: Path) -> None:
    registry = Registry(build_catalog(_settings("--models-ollama", str(layout / "store"))))
    found = {
        asked: instance.name if (instance := registry.find(asked)) else None
        for asked in (
            "lfm2",
            "lfm2:latest",
            "LFM2",
            "registry.ollama.ai/library/lfm2:latest",
            "library/lfm2",
            "someone/custom:v1",
            "someone/custom",
            "custom:v1",
            "hf.co/LiquidAI/LFM2-VL-450M-GGUF:Q4_0",
            "hf.co/LiquidAI/LFM2-VL-450M-GGUF",
        )
    }
    assert found == {
        "lfm2": "lfm2:latest",
        "lfm2:latest": "lfm2:latest",
        "LFM2": "lfm2:latest",
        "registry.ollama.ai/library/lfm2:latest": "lfm2:latest",
        "library/lfm2": "lfm2:latest",
        "someone/custom:v1": "someone/custom:v1",
        "someone/custom": None,  # someone/custom:latest
        "custom:v1": None,  # library/custom:v1
        VL: VL,
        "hf.co/LiquidAI/LFM2-VL-450M-GGUF": None,
    }
    assert [display_name(n) for n in ("lfm2:", "a/b/c/d", "https://hf.co/a/b:c")] == [None, None, "hf.co/a/b:c"]


def test_a_childs_flags_come_from_the_blobs_then_the_preset_and_the_router(layout: Path, tmp_path: Path) -> None:
    store = layout / "store"
    blob = _blob(layout, (layout / "work" / "text.gguf").read_bytes())
    system = _blob(layout, b"You are terse.")
    history = _blob(layout, json.dumps(HISTORY).encode())
    catalog = build_catalog(_settings("--models-ollama", str(store), "-np", "2", "--threads", "1"))
    assert child_argv(catalog["lfm2:latest"].settings, "lfm2:latest", 5000) == [
        "--host", "127.0.0.1", "--port", "5000", "--model", blob, "--alias", "lfm2:latest",
        "--system-prompt-file", system, "--chat-messages-file", history,
        "--ctx-size", "1024", "--parallel", "2", "--threads", "1",
        "--temperature", "0.25", "--top-k", "7", "--repeat-penalty", "1.1", "--stop", "<|im_end|>", "--stop", "END",
        "--jinja",
    ]  # fmt: skip
    preset = tmp_path / "preset.ini"
    preset.write_text("[*]\nctx-size = 2048\ntemp = 0.9\n\n[lfm2:latest]\ntop-k = 3\n")
    ruled = build_catalog(_settings("--models-ollama", str(store), "--models-preset", str(preset)))
    settings = ruled["lfm2:latest"].settings
    # [*]'s ctx-size outweighs num_ctx; the model's own temperature outweighs [*]'s; its section outweighs it
    assert (settings.engine.ctx_size, settings.sampling.temperature, settings.sampling.top_k) == (2048, 0.25, 3)
    assert ruled["lfm2:latest"].source == "preset"  # the section "lfm2:LATEST" (tags upper-cased) is its own


def test_load_time_params_count_where_no_preset_key_or_router_flag_sets_them(tmp_path: Path) -> None:
    params = {"num_ctx": 256, "num_thread": 3, "num_batch": 128}
    OllamaStore(tmp_path).add(
        "registry.ollama.ai/library/loads/latest", [(MODEL, b"GGUF"), (PARAMS, json.dumps(params).encode())]
    )

    def loads(*flags: str) -> tuple[int, int, int, int]:
        settings = build_catalog(_settings("--models-ollama", str(tmp_path), *flags))["loads:latest"].settings
        engine = settings.engine
        return engine.ctx_size, settings.threads.threads, engine.batch_size, engine.ubatch_size

    # num_ctx is a request's context, times the 4 slots; num_batch both batch sizes, as Ollama passes it
    assert loads() == (1024, 3, 128, 128)
    assert loads("-np", "2") == (512, 3, 128, 128)
    assert loads("-c", "4096", "-ub", "32", "-t", "5") == (4096, 5, 2048, 32)  # the router's flags outweigh them


def test_ollamas_variables_are_every_models_weakest_defaults(tmp_path: Path) -> None:
    """As in Ollama, a Modelfile's ``num_ctx`` outweighs ``OLLAMA_CONTEXT_LENGTH``; a preset's key outweighs
    ``OLLAMA_NUM_PARALLEL``; with neither, the variables count."""
    store = OllamaStore(tmp_path / "store")
    store.add("registry.ollama.ai/library/own/latest", [(MODEL, b"GGUF"), (PARAMS, b'{"num_ctx": 256}')])
    store.add("registry.ollama.ai/library/bare/latest", [(MODEL, b"GGUF")])
    preset = tmp_path / "preset.ini"
    preset.write_text("version = 1\n\n[bare:latest]\nparallel = 3\n")
    environ = {"OLLAMA_CONTEXT_LENGTH": "1000", "OLLAMA_NUM_PARALLEL": "2"}
    flags = ("--models-ollama", str(tmp_path / "store"), "--models-preset", str(preset))
    catalog = build_catalog(_settings(*flags, **environ))
    sizes = {name: (spec.settings.engine.ctx_size, spec.settings.engine.parallel) for name, spec in catalog.items()}
    # own: num_ctx 256 a request over the variable's 2 slots; bare: the variable's 1000 x 2, the preset's 3 slots
    assert sizes == {"own:latest": (512, 2), "bare:latest": (2000, 3)}


def test_a_layer_lfmserve_cannot_read_fails_its_model_only(tmp_path: Path) -> None:
    store = OllamaStore(tmp_path / "store")
    store.add("registry.ollama.ai/library/talk/latest", [(MODEL, b"GGUF"), (MESSAGES, b'[{"role": "narrator"}]')])
    store.add("registry.ollama.ai/library/odd/latest", [(MODEL, b"GGUF"), (PARAMS, b"top_k 7")])
    (tmp_path / "store" / "manifests" / "registry.ollama.ai" / "library" / "cut").mkdir()
    (tmp_path / "store" / "manifests" / "registry.ollama.ai" / "library" / "cut" / "latest").write_text('{"layers": [')
    store.add("registry.ollama.ai/library/hot/latest", [(MODEL, b"GGUF"), (PARAMS, b'{"temperature": "hot"}')])
    store.add("registry.ollama.ai/library/range/latest", [(MODEL, b"GGUF"), (PARAMS, b'{"num_keep": -5}')])
    store.add("registry.ollama.ai/library/text/latest", [(MODEL, b"NOPE")])
    store.add("registry.ollama.ai/library/fine/latest", [(MODEL, b"GGUF")])
    catalog = build_catalog(_settings("--models-ollama", str(tmp_path / "store")))
    problems = {name: spec.problem for name, spec in catalog.items()}
    blob = tmp_path / "store" / "blobs" / f"sha256-{hashlib.sha256(b'NOPE').hexdigest()}"
    params = tmp_path / "store" / "blobs" / f"sha256-{hashlib.sha256(b'top_k 7').hexdigest()}"
    assert problems == {
        "cut:latest": "its manifest is not valid JSON: Expecting value: line 1 column 13 (char 12)",
        "fine:latest": None,
        "odd:latest": f"its params blob {params} is not valid JSON: Expecting value: line 1 column 1 (char 0)",
        "talk:latest": 'its messages layer is not a list of {"role": system|user|assistant|tool, "content": text}',
        "hot:latest": "its params layer sets temperature to 'hot', not a number",
        "range:latest": "model 'range:latest': argument --keep: invalid keep = -5 (see --help)",
        "text:latest": f"its model blob {blob} is not a GGUF file",
    }


def test_the_store_is_found_from_ollama_models_else_the_default_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    service = tmp_path / "usr" / "share" / "ollama" / ".ollama" / "models"
    monkeypatch.setattr(ollama_store, "DEFAULT_FOLDERS", ("~/.ollama/models", str(service)))
    assert store_folder(_settings().router) is None
    (service / "manifests").mkdir(parents=True)
    assert store_folder(_settings().router) == str(service)  # the Linux service's
    default = tmp_path / ".ollama" / "models"
    (default / "manifests").mkdir(parents=True)
    assert store_folder(_settings().router) == str(default)  # a user's own first
    assert store_folder(_settings(OLLAMA_MODELS="/elsewhere").router) == "/elsewhere"
    assert store_folder(_settings(OLLAMA_MODELS="").router) == str(default)  # empty is unset, as in Ollama
    assert store_folder(_settings("--models-ollama", "/mine", OLLAMA_MODELS="/elsewhere").router) == "/mine"
    assert store_folder(_settings("--no-models-ollama", OLLAMA_MODELS="/elsewhere").router) is None


def test_another_sources_name_or_alias_keeps_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = OllamaStore(tmp_path / "store")
    for name in ("lfm2", "chat", "mine"):
        store.add(f"registry.ollama.ai/library/{name}/latest", [(MODEL, b"GGUF")])
    preset = tmp_path / "preset.ini"
    preset.write_text(
        f"[mine]\nmodel = {tmp_path / 'mine.gguf'}\n\n[other]\nmodel = {tmp_path / 'o.gguf'}\nalias = chat:latest\n"
    )
    catalog = build_catalog(_settings("--models-ollama", str(tmp_path / "store"), "--models-preset", str(preset)))
    assert {name: spec.source for name, spec in catalog.items()} == {
        "lfm2:latest": "ollama",
        "mine": "preset",
        "other": "preset",
    }
    assert [r.getMessage() for r in caplog.records if r.name == "lfmserve.router.catalog"] == [
        "Ollama's model chat:latest is left out: the router already has a model named chat:latest",
        "Ollama's model mine:latest is left out: the router already has a model named mine",
    ]


def test_a_store_without_manifests_lists_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "store").mkdir()
    assert build_catalog(_settings("--models-ollama", str(tmp_path / "store"))) == {}
    assert f"Ollama's store {tmp_path / 'store'} has no manifests folder: none of its models are listed" in caplog.text
    assert os.listdir(tmp_path / "store") == []  # read, never written
