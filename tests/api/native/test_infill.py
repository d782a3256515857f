"""``/infill`` over real HTTP, on a tiny llama model whose vocabulary names its fill-in-the-middle tokens: the prompt
is llama-server's (extra files, BOS, FIM_PRE prefix + prompt, FIM_SUF suffix, FIM_MID), streamed or not, and
llama-server's errors for a model without FIM tokens and for malformed fields."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.settings import Settings
from lfmserve.testing import TinyLfm2, write_lfm2_gguf
from tests.conftest import ServerThread, sse_events

CODE = {
    "input_prefix": '#include <cstdio>\n#include "llama.h"\n\nint main() {\n',
    "prompt": "    int n_threads = llama_",
    "input_suffix": "}\n",
}
GREEDY = {"temperature": 0, "n_predict": 8}
NO_TEXT = 'extra_context chunk must contain a "text" field with a string value'
BAD_NAME = 'extra_context chunk\'s "filename" field must be a string'


@pytest.fixture(scope="module")
def server(server_factory: Callable[..., ServerThread], models_dir: Path) -> ServerThread:
    model = write_lfm2_gguf(models_dir / "tiny-infill.gguf", TinyLfm2(seed=3, arch="llama", fim=True))
    return server_factory(Settings.of(model=str(model), ctx_size=4096, parallel=1, threads=2))


def infill(server: ServerThread, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + "/infill", json=body, timeout=60)


def test_the_prompt_is_llama_servers_fill_in_the_middle(server: ServerThread) -> None:
    answer = infill(server, {**CODE, **GREEDY}).json()
    fim = "<|fim_pre|>" + CODE["input_prefix"] + CODE["prompt"] + "<|fim_suf|>" + CODE["input_suffix"] + "<|fim_mid|>"
    assert answer["prompt"] == "<|startoftext|>" + fim
    assert answer["tokens_predicted"] == 8 and answer["stop_type"] == "limit"
    tokenized = httpx.post(server.url + "/tokenize", json={"content": answer["prompt"], "parse_special": True})
    assert answer["tokens_evaluated"] == len(tokenized.json()["tokens"])
    extra = [{"filename": "llama.h", "text": "LLAMA_API int32_t llama_n_threads();\n"}]
    with_extra = infill(server, {**CODE, **GREEDY, "input_extra": extra}).json()
    # No FIM_SEP in this vocabulary: the extra file comes first, after llama-server's plain snippet separator.
    snippet = "\n\n--- snippet ---\n\nLLAMA_API int32_t llama_n_threads();\n"
    assert with_extra["prompt"] == snippet + "<|startoftext|>" + fim


def test_a_stream_is_the_same_answer(server: ServerThread) -> None:
    whole = infill(server, {**CODE, **GREEDY}).json()
    events = [json.loads(e) for e in sse_events(server, "/infill", {**CODE, **GREEDY, "stream": True})]
    assert "".join(e["content"] for e in events) == whole["content"] and events[-1]["stop"] is True


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"input_extra": [{}]}, NO_TEXT),
        ({"input_extra": [{"filename": "ok"}]}, NO_TEXT),
        ({"input_extra": [{"filename": 123}]}, NO_TEXT),
        ({"input_extra": [{"filename": 123, "text": "abc"}]}, BAD_NAME),
        ({"input_extra": [{"filename": 123, "text": 456}]}, NO_TEXT),
        ({"input_extra": {"a": 1}}, '"input_extra" must be an array of {"filename": string, "text": string}'),
        ({"input_suffix": None}, '"input_suffix" is required'),
    ],
)  # fmt: skip
def test_malformed_fields_are_400s_with_llama_servers_messages(
    server: ServerThread, fields: dict[str, Any], message: str
) -> None:
    body = {key: value for key, value in {**CODE, **fields}.items() if value is not None}
    response = infill(server, body)
    assert response.status_code == 400 and response.json()["error"]["message"] == message


def test_a_model_without_fim_tokens_answers_501(tiny_server: ServerThread) -> None:
    response = infill(tiny_server, CODE)
    assert response.status_code == 501
    assert response.json()["error"]["message"] == (
        "Infill is not supported by this model: prefix token is missing. suffix token is missing. "
        "middle token is missing. "
    )
