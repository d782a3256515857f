"""The engine's tests share one tiny-LFM2 engine per module, and these helpers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lfmserve.engine.core import Engine
from lfmserve.engine.records import EngineConfig, EngineOutput, EngineRequest, SamplingParams
from lfmserve.engine.stream import SyncStream
from lfmserve.llama.model import NativeModel

GREEDY = SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0)


@pytest.fixture(scope="module")
def model(tiny_gguf: Path) -> Iterator[NativeModel]:
    m = NativeModel(tiny_gguf)
    yield m
    m.close()


@pytest.fixture(scope="module")
def engine(model: NativeModel) -> Iterator[Engine]:
    e = Engine(model, EngineConfig(n_ctx=1024, n_slots=4, n_batch=256, n_ubatch=256, n_threads=2))
    yield e
    e.close()


def prompt(model: NativeModel, text: str) -> tuple[int, ...]:
    return tuple(
        model.tokenize(
            f"<|startoftext|><|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n",
            add_special=False,
            parse_special=True,
        )
    )


def run(engine: Engine, request: EngineRequest) -> list[EngineOutput]:
    stream = SyncStream()
    engine.submit(request, stream)
    return list(stream)


def tokens_of(outputs: list[EngineOutput]) -> list[int]:
    return [t for out in outputs for t in out.token_ids]
