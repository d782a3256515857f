"""Starting requests: a prefix that another slot is still computing is computed once, then copied."""

from __future__ import annotations

import threading

from lfmserve.engine.core import Engine
from lfmserve.engine.records import EngineConfig, EngineRequest, SamplingParams
from lfmserve.engine.stream import SyncStream
from lfmserve.llama.model import NativeModel

SYSTEM = "You are a helpful assistant. " * 60


def _chat(model: NativeModel, question: str) -> tuple[int, ...]:
    text = f"<|startoftext|><|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
    return tuple(model.tokenize(text + "<|im_start|>assistant\n", add_special=False, parse_special=True))


def test_a_shared_system_prompt_being_computed_is_waited_for_then_copied(model: NativeModel) -> None:
    """The first prompt prefills 128 tokens a step (stopping at its checkpoints at 256 and 431); the second
    waits until fewer than 64 of the tokens they share remain to compute (after 384), then copies those."""
    engine = Engine(model, EngineConfig(n_ctx=4096, n_slots=2, n_batch=128, n_ubatch=128, n_threads=1))
    try:
        first, second = _chat(model, "What is machine learning?"), _chat(model, "Write a haiku about the ocean.")
        system_end = model.tokenize(
            f"<|startoftext|><|im_start|>system\n{SYSTEM}<|im_end|>\n", add_special=False, parse_special=True
        )
        assert len(system_end) == 431 and first[:431] == second[:431]
        streams = [SyncStream(), SyncStream()]
        greedy = SamplingParams(temperature=0)
        hold = threading.Event()
        engine._inbox.send(hold.wait)  # both requests reach the engine at once, however the threads are scheduled
        for prompt, stream in zip((first, second), streams, strict=True):
            engine.submit(EngineRequest(prompt_tokens=prompt, sampling=greedy, max_tokens=2), stream)
        hold.set()
        outs = [list(stream)[-1] for stream in streams]
        assert [o.id_slot for o in outs] == [0, 1]
        assert [o.n_cached_tokens for o in outs] == [0, 384]
        assert (engine.stats.n_requests_deferred, engine.stats.n_slot_copies) == (1, 1)
        assert engine.stats.n_prompt_tokens == len(first) + len(second) - 384  # the shared part computed once
    finally:
        engine.close()
