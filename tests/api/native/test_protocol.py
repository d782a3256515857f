"""llama-server's native bodies: which ``prompt`` values are one prompt and which are several."""

from __future__ import annotations

import json

import pytest

from lfmserve.api.body import parse_body
from lfmserve.api.native.protocol import CompletionRequest, SlotFileRequest
from lfmserve.errors import InvalidRequest


@pytest.mark.parametrize(
    ("prompt", "prompts"),
    [
        ("text", ["text"]),
        ([1, 2, 3], [[1, 2, 3]]),
        ([12, "mixed", 34], [[12, "mixed", 34]]),
        (["one"], ["one"]),
        (["a", "b"], ["a", "b"]),
        ([[1, 2], [3]], [[1, 2], [3]]),
        ([[1, 2], "b"], [[1, 2], "b"]),
        ([], [[]]),
    ],
)
def test_prompts_are_one_or_several_as_llama_server_reads_them(prompt: object, prompts: list[object]) -> None:
    body = parse_body(CompletionRequest, json.dumps({"prompt": prompt}).encode())
    assert body.prompts() == prompts


@pytest.mark.parametrize("filename", ["../etc/passwd", ".hidden", "a/b", "", "x" * 202])
def test_slot_files_are_plain_names(filename: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_body(SlotFileRequest, json.dumps({"filename": filename}).encode())
    assert info.value.param == "filename"


def test_openais_legacy_logprobs_or_llama_servers_n_probs_ask_for_probabilities() -> None:
    assert parse_body(CompletionRequest, b'{"prompt": "x", "logprobs": 0}').generation_options().n_probs == 0
    assert parse_body(CompletionRequest, b'{"prompt": "x", "n_probs": 3}').generation_options().n_probs == 3
    assert parse_body(CompletionRequest, b'{"prompt": "x"}').generation_options().n_probs is None
