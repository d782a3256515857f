"""A generation that fills its slot: stopped there, truncated; or, with ``--context-shift`` on an attention-only
model, the older half dropped (after the BOS) and generation going on, as llama-server does."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lfmserve.engine.core import Engine
from lfmserve.engine.records import EngineConfig, EngineOutput, EngineRequest
from lfmserve.llama.model import NativeModel
from tests.engine.conftest import GREEDY, run, tokens_of

#: A 256-token slot (llama-server's suite: -c 512 -np 2).
CONFIG = EngineConfig(n_ctx=512, n_slots=2, n_batch=256, n_ubatch=256, n_threads=2)


@pytest.fixture(scope="module")
def llama_model(tiny_llama_gguf: Path) -> Iterator[NativeModel]:
    m = NativeModel(tiny_llama_gguf)
    yield m
    m.close()


def _prompt(model: NativeModel, n: int) -> tuple[int, ...]:
    """``n`` tokens, the first the BOS when the model adds one (what a context shift keeps)."""
    bos = tuple(model.tokenize("", add_special=True, parse_special=False))
    rng = np.random.default_rng(n)
    return bos + tuple(int(t) for t in rng.integers(10, model.n_vocab, n - len(bos)))


def _generate(engine: Engine, prompt: tuple[int, ...], max_tokens: int) -> list[EngineOutput]:
    sampling = replace(GREEDY, ignore_eos=True)  # a random model may end early
    return run(engine, EngineRequest(prompt_tokens=prompt, sampling=sampling, max_tokens=max_tokens, id_slot=0))


def test_without_shifting_generation_stops_where_the_slot_is_full(llama_model: NativeModel) -> None:
    engine = Engine(llama_model, CONFIG)
    try:
        prompt = _prompt(llama_model, 200)
        full = _generate(engine, prompt, -1)
        # the prompt and 56 tokens fill the 256 cells: the last token sampled would need the 257th
        last = full[-1]
        assert (len(tokens_of(full)), last.finish_reason, last.stop_type, last.truncated) == (
            56,
            "length",
            "limit",
            True,
        )
        short = _generate(engine, prompt, 32)[-1]
        assert (short.n_decoded, short.finish_reason, short.truncated) == (32, "length", False)
    finally:
        engine.close()


def test_a_full_slot_drops_its_older_half_and_goes_on(llama_model: NativeModel) -> None:
    plain = Engine(llama_model, CONFIG)
    shifting = Engine(llama_model, replace(CONFIG, context_shift=True))
    try:
        prompt = _prompt(llama_model, 200)
        outputs = _generate(shifting, prompt, 96)
        generated = tokens_of(outputs)
        last = outputs[-1]
        assert (len(generated), last.finish_reason, last.truncated, shifting.stats.n_context_shifts) == (
            96,
            "length",
            True,
            1,
        )
        # the 56th token was sampled before the shift: up to it, the same as without shifting
        assert generated[:56] == tokens_of(_generate(plain, prompt, 56))
        n_keep = 1 if llama_model.info.add_bos else 0
        held = [*prompt, *generated[:-1]]  # the last token sampled is never decoded
        n_discard = (255 - n_keep) // 2  # half of what followed the kept start when the slot was full
        assert shifting.slot_tokens(0) == held[:n_keep] + held[n_keep + n_discard :]
        # the shifted memory is consistent with the tokens the slot lists: all of it is reused
        again = _generate(shifting, (*shifting.slot_tokens(0), 42), 4)[-1]
        assert (again.n_cached_tokens, again.n_decoded, again.truncated) == (len(held) - n_discard, 4, False)
    finally:
        plain.close()
        shifting.close()


def test_a_generation_long_enough_shifts_again_and_again(llama_model: NativeModel) -> None:
    engine = Engine(llama_model, replace(CONFIG, context_shift=True))
    try:
        last = _generate(engine, _prompt(llama_model, 8), 600)[-1]
        # shifts at 255 tokens held, each dropping 127: after the first at token 248, one every 127 tokens
        assert (last.n_decoded, last.truncated, engine.stats.n_context_shifts) == (600, True, 3)
    finally:
        engine.close()


def test_a_model_whose_memory_cannot_shift_stops_instead(tiny_gguf: Path) -> None:
    model = NativeModel(tiny_gguf)  # hybrid LFM2: its recurrent state cannot drop tokens from its middle
    engine = Engine(model, replace(CONFIG, context_shift=True))
    try:
        last = _generate(engine, _prompt(model, 200), 96)[-1]
        assert (last.n_decoded, last.truncated, engine.stats.n_context_shifts) == (56, True, 0)
    finally:
        engine.close()
        model.close()


@pytest.mark.parametrize(("n_keep", "n_discard"), [(10, 0), (10, 40), (-1, 0), (0, 300)])
def test_a_shift_keeps_n_keep_prompt_tokens_and_drops_n_discard(
    llama_model: NativeModel, n_keep: int, n_discard: int
) -> None:
    """llama-server's rule: the BOS and ``n_keep`` tokens after it stay (-1: the whole prompt); ``n_discard`` of
    those that follow go (0: half of them), at most all but one."""
    engine = Engine(llama_model, replace(CONFIG, context_shift=True))
    try:
        prompt = _prompt(llama_model, 200)
        sampling = replace(GREEDY, ignore_eos=True)
        request = EngineRequest(
            prompt_tokens=prompt, sampling=sampling, max_tokens=60, id_slot=0, n_keep=n_keep, n_discard=n_discard
        )
        generated = tokens_of(run(engine, request))
        assert engine.stats.n_context_shifts == 1
        bos = 1 if llama_model.info.add_bos else 0
        kept = (200 if n_keep < 0 else n_keep) + bos  # the prompt's 200 tokens include its BOS: llama-server adds it
        held = [*prompt, *generated[:56]]  # 255 tokens when the slot was full (the 56th sampled, not yet decoded)
        dropped = min(n_discard or (255 - kept) // 2, 255 - kept - 1)
        expected = held[:kept] + held[kept + dropped :] + generated[56:-1]
        assert engine.slot_tokens(0) == expected
    finally:
        engine.close()
