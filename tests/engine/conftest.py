"""The engine's tests share one tiny-LFM2 engine per module, and these helpers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from lfmserve.engine.core import Engine
from lfmserve.engine.records import EngineConfig, EngineOutput, EngineRequest, SamplingParams
from lfmserve.engine.stream import SyncStream
from lfmserve.llama.model import NativeModel
from lfmserve.llama.mtmd import Projector, PromptChunk

GREEDY = SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0)


@pytest.fixture(scope="module")
def model(tiny_gguf: Path) -> Iterator[NativeModel]:
    m = NativeModel(tiny_gguf)
    yield m
    m.close()


@pytest.fixture(scope="module")
def llama_model(tiny_llama_gguf: Path) -> Iterator[NativeModel]:
    """The tiny attention-only model: its prompts prefill without checkpoints, and its cells can be removed."""
    m = NativeModel(tiny_llama_gguf)
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


def random_tokens(model: NativeModel, n: int, seed: int) -> tuple[int, ...]:
    """``n`` random ids of ``model``'s vocabulary from 10 up, the same ones for the same ``seed``."""
    rng = np.random.default_rng(seed)
    return tuple(int(t) for t in rng.integers(10, model.n_vocab, n))


def run(engine: Engine, request: EngineRequest) -> list[EngineOutput]:
    stream = SyncStream()
    engine.submit(request, stream)
    return list(stream)


def tokens_of(outputs: list[EngineOutput]) -> list[int]:
    return [t for out in outputs for t in out.token_ids]


def hold_encodes_beside(projector: Projector) -> tuple[threading.Event, threading.Event]:
    """Make ``projector``'s encodes beside the engine wait: (set when one starts, set it to let it go on)."""
    entered, release = threading.Event(), threading.Event()
    encode = projector.encode

    def held(chunk: PromptChunk, *, beside: bool = False) -> npt.NDArray[np.float32]:
        if beside:
            entered.set()
            assert release.wait(30)
        return encode(chunk, beside=beside)

    projector.encode = held  # type: ignore[method-assign]
    return entered, release
