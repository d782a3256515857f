"""``-lm auto`` holds the weights once: the mapped pages of the tensors llama.cpp repacked are given back after
load, only those, and the model computes what it computed before (Gemma-3-270M Q4_K_M, whose matrices llama.cpp
repacks on CPUs with AVX2 or AVX-512 and without AMX)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel
from lfmserve.process_memory import mapped_bytes

PROMPT = [2, 9259, 236764, 1144, 563, 506, 5279, 529]


def _greedy(model: NativeModel, n: int) -> tuple[list[int], np.ndarray]:
    """``n`` greedy tokens after :data:`PROMPT`, and the prompt's logits."""
    context = NativeContext(model, n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1, n_threads=1, n_threads_batch=1)
    try:
        tokens: list[int] = list(PROMPT)
        first: np.ndarray | None = None
        for _ in range(n):
            start = 0 if first is None else len(tokens) - 1
            context.batch.clear()
            index = context.batch.add(tokens[start:], start, 0, True)
            context.decode()
            logits = context.logits(index).copy()
            first = logits if first is None else first
            tokens.append(int(logits.argmax()))
        assert first is not None
        return tokens[len(PROMPT) :], first
    finally:
        context.close()


def _kernel_pages_out_cold_pages() -> bool:
    """A running DAMON scheme that pages out memory nobody touched for a while (some VMs run one): resident page
    counts then drift while a test runs, so they cannot be compared exactly."""
    root = Path("/sys/kernel/mm/damon/admin/kdamonds")
    for kdamond in root.glob("*"):
        state = kdamond / "state"
        if state.exists() and state.read_text().strip() == "on":
            actions = kdamond.glob("contexts/*/schemes/*/action")
            if any(action.read_text().strip() == "pageout" for action in actions):
                return True
    return False


@pytest.mark.skipif(_kernel_pages_out_cold_pages(), reason="the kernel pages out cold pages (DAMON): counts drift")
def test_only_the_repacked_weights_pages_are_given_back(gemma_gguf: Path) -> None:
    path = [str(gemma_gguf)]
    mapped = NativeModel(gemma_gguf, load_mode="mmap")
    try:
        if "CPU_REPACK" not in mapped.buffers:
            pytest.skip("llama.cpp does not repack weights on this CPU: nothing is held twice")
        # llama.cpp maps with MAP_POPULATE: every page of the range it keeps mapped is resident.
        one_mapping = mapped_bytes(None, path)
        released = NativeModel(gemma_gguf, load_mode="auto")
        try:
            assert mapped.released_bytes == 0 and released.released_bytes > 0
            # The second mapping of the same range holds exactly the first's pages less those given back.
            assert mapped_bytes(None, path) == 2 * one_mapping - released.released_bytes
            # What was given back is the repacked copy's source, less the pages it shares with other tensors.
            repacked = released.buffers["CPU_REPACK"]
            assert 0.98 * repacked < released.released_bytes <= repacked
            assert _greedy(released, 12)[0] == _greedy(mapped, 12)[0]
            assert np.array_equal(_greedy(released, 1)[1], _greedy(mapped, 1)[1])
            # Decoding read no page that was given back: none came back.
            assert mapped_bytes(None, path) == 2 * one_mapping - released.released_bytes
        finally:
            released.close()
    finally:
        mapped.close()


def test_without_repacking_or_mapping_nothing_is_given_back(gemma_gguf: Path) -> None:
    unpacked, read = NativeModel(gemma_gguf, repack=False), NativeModel(gemma_gguf, load_mode="none")
    try:
        assert ("CPU_REPACK" in unpacked.buffers, unpacked.released_bytes, read.released_bytes) == (False, 0, 0)
    finally:
        unpacked.close()
        read.close()
