"""Token log-probabilities in OpenAI's chat shape, its legacy completions shape and llama-server's ``n_probs``."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from lfmserve.chat.logprobs import chat_logprobs, legacy_logprobs, native_probabilities
from lfmserve.engine.records import TokenLogprob
from tests.conftest import ASK, ServerThread


def test_logprobs_in_chat_native_and_legacy_shapes(client: openai.OpenAI, tools_server: ServerThread) -> None:
    request: dict[str, Any] = {
        "model": "tiny",
        "messages": ASK,
        "max_tokens": 6,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 3,
        "extra_body": {"ignore_eos": True},
    }
    choice = client.chat.completions.create(**request).choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    steps = choice.logprobs.content
    assert len(steps) == 6 and "".join(s.token for s in steps) == choice.message.content
    for step in steps:
        assert len(step.top_logprobs) == 3 and step.top_logprobs[0].token == step.token  # greedy takes the top one
        assert step.logprob == pytest.approx(step.top_logprobs[0].logprob) and step.logprob <= 0
        assert [t.logprob for t in step.top_logprobs] == sorted((t.logprob for t in step.top_logprobs), reverse=True)
        assert bytes(step.bytes or []).decode("utf-8", "replace") == step.token
    streamed = client.chat.completions.create(**request, stream=True)
    streamed_steps = [
        s for c in streamed if c.choices and c.choices[0].logprobs for s in c.choices[0].logprobs.content or []
    ]
    assert [(s.token, s.logprob) for s in streamed_steps] == [(s.token, s.logprob) for s in steps]
    native = httpx.post(
        tools_server.url + "/completion", json={"prompt": "Hello", "n_predict": 3, "n_probs": 2, "temperature": 0}
    ).json()
    probs = native["completion_probabilities"]
    assert len(probs) == native["tokens_predicted"] and set(probs[0]) == {
        "id",
        "token",
        "bytes",
        "logprob",
        "top_logprobs",
    }
    assert probs[0]["top_logprobs"][0]["id"] == probs[0]["id"] and len(probs[0]["top_logprobs"]) == 2
    legacy = httpx.post(
        tools_server.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 3, "logprobs": 2, "temperature": 0}
    ).json()["choices"][0]["logprobs"]
    assert legacy["tokens"] == [p["token"] for p in probs] and legacy["token_logprobs"] == [p["logprob"] for p in probs]
    assert legacy["text_offset"][0] == 0 and all(len(top) == 2 for top in legacy["top_logprobs"])


# -- the three shapes, without a model ---------------------------------------------------------------------
PIECES = {1: b"Hi", 2: b" there", 3: b"\xe2\x82"}  # 3 is half of a UTF-8 character
STEPS = [TokenLogprob(1, -0.5, ((1, -0.5), (2, -1.5))), TokenLogprob(3, -2.0, ((2, -1.0), (3, -2.0)))]


def test_openais_chat_shape() -> None:
    assert chat_logprobs(STEPS, PIECES.__getitem__, 1) == {
        "content": [
            {
                "token": "Hi",
                "logprob": -0.5,
                "bytes": [72, 105],
                "top_logprobs": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105]}],
            },
            {
                "token": "\ufffd",
                "logprob": -2.0,
                "bytes": [226, 130],
                "top_logprobs": [{"token": " there", "logprob": -1.0, "bytes": [32, 116, 104, 101, 114, 101]}],
            },
        ]
    }


def test_llama_servers_native_shape_adds_ids() -> None:
    assert native_probabilities(STEPS[:1], PIECES.__getitem__, 2) == [
        {
            "id": 1,
            "token": "Hi",
            "logprob": -0.5,
            "bytes": [72, 105],
            "top_logprobs": [
                {"id": 1, "token": "Hi", "logprob": -0.5, "bytes": [72, 105]},
                {"id": 2, "token": " there", "logprob": -1.5, "bytes": [32, 116, 104, 101, 114, 101]},
            ],
        }
    ]


def test_the_legacy_shape_is_parallel_lists_with_text_offsets() -> None:
    assert legacy_logprobs(STEPS, PIECES.__getitem__, 2, text_offset=10) == {
        "tokens": ["Hi", "\ufffd"],
        "token_logprobs": [-0.5, -2.0],
        "top_logprobs": [{"Hi": -0.5, " there": -1.5}, {" there": -1.0, "\ufffd": -2.0}],
        "text_offset": [10, 12],
    }
