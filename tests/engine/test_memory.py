"""Every prompt-cache path gives the same tokens as no cache, and reuses exactly what it should.

Greedy, on the tiny hybrid LFM2 model (conversations through its chat template) and on Gemma-3-270M
(sliding-window attention, plain text).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lfmserve.chat.template import ChatTemplate
from lfmserve.engine.core import Engine
from lfmserve.engine.records import EngineConfig, EngineOutput, EngineRequest, SamplingParams
from lfmserve.engine.scheduler import common_prefix_length
from lfmserve.engine.stream import SyncStream
from lfmserve.llama.model import NativeModel

GREEDY = SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0)
SYSTEM = {"role": "system", "content": "You are a helpful assistant. " * 12}


@pytest.fixture(scope="module")
def lfm(tiny_gguf: Path) -> Iterator[NativeModel]:
    model = NativeModel(tiny_gguf)
    yield model
    model.close()


def make_engine(model: NativeModel, **config: Any) -> Engine:
    return Engine(
        model, EngineConfig(**{"n_ctx": 4096, "n_slots": 4, "n_batch": 512, "n_ubatch": 512, "n_threads": 2, **config})
    )


@pytest.fixture(scope="module")
def engine(lfm: NativeModel) -> Iterator[Engine]:
    e = make_engine(lfm)
    yield e
    e.close()


def chat_tokens(
    model: NativeModel, messages: list[dict[str, str]], *, generation_prompt: bool = True
) -> tuple[int, ...]:
    assert model.info.chat_template is not None
    template = ChatTemplate(model.info.chat_template, bos_token=model.info.bos_token, eos_token=model.info.eos_token)
    text = template.render(messages, add_generation_prompt=generation_prompt)
    return tuple(model.tokenize(text, add_special=False, parse_special=True))


def run(
    engine: Engine,
    prompt: tuple[int, ...],
    *,
    slot: int = -1,
    cache: bool = True,
    n: int = 8,
    sampling: SamplingParams = GREEDY,
) -> EngineOutput:
    """Generate (greedily by default); returns the last output, with ``token_ids`` holding all generated tokens."""
    stream = SyncStream()
    engine.submit(
        EngineRequest(prompt_tokens=prompt, sampling=sampling, max_tokens=n, cache_prompt=cache, id_slot=slot), stream
    )
    outputs = list(stream)
    tokens = tuple(t for o in outputs for t in o.token_ids)
    last = outputs[-1]
    return EngineOutput(
        text="".join(o.text for o in outputs),
        token_ids=tokens,
        id_slot=last.id_slot,
        n_prompt_tokens=last.n_prompt_tokens,
        n_cached_tokens=last.n_cached_tokens,
        n_decoded=last.n_decoded,
        timings=last.timings,
        finish_reason=last.finish_reason,
    )


def uncached(engine: Engine, prompt: tuple[int, ...], slot: int) -> tuple[int, ...]:
    return run(engine, prompt, slot=slot, cache=False).token_ids


def turn(i: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"Question {i}: tell me about the ocean and the waves."},
        {"role": "assistant", "content": f"Answer {i}: the ocean is wide and the waves are blue."},
    ]


def boundary(model: NativeModel, messages: list[dict[str, str]]) -> int:
    """Tokens up to the end of the last of ``messages`` (a checkpointed message boundary)."""
    return len(chat_tokens(model, messages, generation_prompt=False))


def test_a_continued_conversation_prefills_only_the_new_suffix(engine: Engine, lfm: NativeModel) -> None:
    first = [SYSTEM, {"role": "user", "content": "My name is Ada."}]
    p1 = chat_tokens(lfm, first)
    out1 = run(engine, p1, slot=0)
    held = engine.slot_tokens(0)
    assert held == list(p1) + list(out1.token_ids[:-1])  # the last sampled token is never decoded
    second = first + [{"role": "assistant", "content": out1.text}, {"role": "user", "content": "What is my name?"}]
    p2 = chat_tokens(lfm, second)
    # The random model's reply re-tokenizes differently (a real model's comes back token for token: the next
    # test), so the cache diverges inside it and the state comes from the checkpoint at the end of the prompt.
    assert len(p1) <= common_prefix_length(held, p2) < len(held)
    out2 = run(engine, p2, slot=0)
    assert out2.n_cached_tokens == len(p1) and out2.timings.prompt_n == len(p2) - len(p1)
    assert out2.token_ids == uncached(engine, p2, 1)


def test_a_reply_kept_token_for_token_is_continued_in_one_call_and_checkpointed_for_free(
    engine: Engine, lfm: NativeModel
) -> None:
    run(engine, chat_tokens(lfm, [SYSTEM, {"role": "user", "content": "Tell me something."}]), slot=0)
    held = tuple(engine.slot_tokens(0))  # the prompt and the reply as generated (a real model's history)

    def next_turn(question: str) -> tuple[int, ...]:
        text = f"<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
        return held + tuple(lfm.tokenize(text, add_special=False, parse_special=True))

    calls = engine.stats.n_decode_calls
    out = run(engine, next_turn("And then?"), slot=0, n=1)
    # The message boundary 2 tokens in is not worth its own decode call; the start is checkpointed instead.
    assert out.n_cached_tokens == len(held) and engine.stats.n_decode_calls == calls + 1
    edited = next_turn("An edited question instead?")
    out = run(engine, edited, slot=0)
    assert out.n_cached_tokens == len(held) and out.token_ids == uncached(engine, edited, 1)


def test_trimmed_history_reuses_the_system_message(engine: Engine, lfm: NativeModel) -> None:
    history = [SYSTEM, *turn(1), *turn(2), *turn(3), {"role": "user", "content": "And now?"}]
    run(engine, chat_tokens(lfm, history), slot=0)
    trimmed = [SYSTEM, *turn(2), *turn(3), {"role": "user", "content": "And now?"}]
    prompt = chat_tokens(lfm, trimmed)
    out = run(engine, prompt, slot=0)
    assert out.n_cached_tokens == boundary(lfm, [SYSTEM])
    assert out.token_ids == uncached(engine, prompt, 1)


def test_seeded_sampling_from_kept_logits_matches_a_fresh_run(engine: Engine, lfm: NativeModel) -> None:
    prompt = chat_tokens(lfm, [SYSTEM, {"role": "user", "content": "Surprise me."}])
    seeded = SamplingParams(temperature=1.0, top_k=40, top_p=0.9, min_p=0.05, seed=1234)
    first = run(engine, prompt, slot=0, sampling=seeded, n=12)
    again = run(engine, prompt, slot=0, sampling=seeded, n=12)  # samples its first token from the kept logits
    fresh = run(engine, prompt, slot=0, sampling=seeded, n=12, cache=False)
    assert again.n_cached_tokens == len(prompt) and fresh.n_cached_tokens == 0
    assert first.token_ids == again.token_ids == fresh.token_ids


def test_regenerating_the_last_reply_decodes_nothing_before_sampling(engine: Engine, lfm: NativeModel) -> None:
    prompt = chat_tokens(lfm, [SYSTEM, *turn(1), {"role": "user", "content": "Again please."}])
    first = run(engine, prompt, slot=0)
    again = run(engine, prompt, slot=0)
    assert again.n_cached_tokens == len(prompt) and again.timings.prompt_n == 0  # sampled from the kept logits
    assert first.token_ids == again.token_ids == uncached(engine, prompt, 1)


def test_an_edited_earlier_message_reuses_everything_before_it(engine: Engine, lfm: NativeModel) -> None:
    history = [SYSTEM, *turn(1), *turn(2), {"role": "user", "content": "Last one."}]
    run(engine, chat_tokens(lfm, history), slot=0)
    edited = [
        SYSTEM,
        *turn(1),
        {"role": "user", "content": "An edited question."},
        turn(2)[1],
        {"role": "user", "content": "Last one."},
    ]
    prompt = chat_tokens(lfm, edited)
    out = run(engine, prompt, slot=0)
    assert out.n_cached_tokens == boundary(lfm, [SYSTEM, *turn(1)])
    assert out.token_ids == uncached(engine, prompt, 1)


def test_a_prefix_in_another_slot_is_copied_not_recomputed(engine: Engine, lfm: NativeModel) -> None:
    engine.clear_slot(2)
    run(engine, chat_tokens(lfm, [SYSTEM, {"role": "user", "content": "First user."}]), slot=0)
    prompt = chat_tokens(lfm, [SYSTEM, {"role": "user", "content": "Second user, other slot."}])
    copies = engine.stats.n_slot_copies
    out = run(engine, prompt, slot=2)
    assert out.n_cached_tokens == boundary(lfm, [SYSTEM]) and engine.stats.n_slot_copies == copies + 1
    assert out.token_ids == uncached(engine, prompt, 3)


def test_an_evicted_sequence_comes_back_from_ram(lfm: NativeModel) -> None:
    engine = make_engine(lfm, n_slots=1, n_ctx=1024)
    try:
        prompt = chat_tokens(lfm, [SYSTEM, *turn(1), {"role": "user", "content": "Remember this."}])
        first = run(engine, prompt)
        run(engine, chat_tokens(lfm, [{"role": "user", "content": "Something else entirely, " * 20}]))
        assert engine.stats.n_ram_saves == 1 and len(engine.ram_cache.entries) == 1
        again = run(engine, prompt)
        assert engine.stats.n_ram_restores == 1
        assert again.n_cached_tokens == len(prompt) and again.token_ids == first.token_ids
    finally:
        engine.close()


def test_idle_slots_move_to_ram_when_another_request_starts(lfm: NativeModel) -> None:
    engine = make_engine(lfm, n_slots=2)
    try:
        prompt = chat_tokens(lfm, [SYSTEM, *turn(1), {"role": "user", "content": "Park me."}])
        first = run(engine, prompt, slot=0)
        held = engine.slot_tokens(0)
        run(engine, chat_tokens(lfm, [{"role": "user", "content": "Meanwhile, something else."}]), slot=1)
        assert engine.slot_tokens(0) == [] and [list(e.tokens) for e in engine.ram_cache.entries] == [held]
        again = run(engine, prompt, slot=0)
        assert engine.stats.n_ram_restores == 1 and again.n_cached_tokens == len(prompt)
        assert again.token_ids == first.token_ids
    finally:
        engine.close()


def test_idle_slots_stay_with_no_cache_idle_slots(lfm: NativeModel) -> None:
    engine = make_engine(lfm, n_slots=2, cache_idle_slots=False)
    try:
        prompt = chat_tokens(lfm, [SYSTEM, {"role": "user", "content": "Stay here."}])
        run(engine, prompt, slot=0)
        held = engine.slot_tokens(0)
        run(engine, chat_tokens(lfm, [{"role": "user", "content": "Meanwhile, something else."}]), slot=1)
        assert engine.slot_tokens(0) == held and engine.ram_cache.entries == () and engine.stats.n_ram_saves == 0
    finally:
        engine.close()


def test_idle_slot_parking_logs_llama_servers_test_tags(lfm: NativeModel, caplog: pytest.LogCaptureFixture) -> None:
    """llama-server's suite (test_kv_keep_only_active.py) follows parking by these tags in the --verbose log."""
    caplog.set_level(logging.DEBUG, logger="lfmserve.engine.memory")
    engine = make_engine(lfm, n_slots=2)
    try:
        assert "__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__" in caplog.text
        prompt = chat_tokens(lfm, [SYSTEM, {"role": "user", "content": "Park me."}])
        run(engine, prompt, slot=0)
        assert "__TEST_TAG_CACHE_IDLE_SLOT__" not in caplog.text  # slot 1 had nothing to keep
        run(engine, chat_tokens(lfm, [{"role": "user", "content": "Meanwhile."}]), slot=1)
        assert caplog.text.count("__TEST_TAG_CACHE_IDLE_SLOT__") == 1 and "updating prompt cache" not in caplog.text
        assert run(engine, prompt).n_cached_tokens == len(prompt)  # back from RAM, into the idle slot 0
        assert "updating prompt cache" in caplog.text
    finally:
        engine.close()
    caplog.clear()
    make_engine(lfm, n_slots=2, cache_idle_slots=False).close()
    assert "__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__" not in caplog.text


@pytest.mark.parametrize("ram_bytes", [0, 4096])  # none, or smaller than one sequence's state
def test_idle_slots_that_ram_cannot_take_keep_their_memory(lfm: NativeModel, ram_bytes: int) -> None:
    engine = make_engine(lfm, n_slots=2, cache_ram_bytes=ram_bytes)
    try:
        prompt = chat_tokens(lfm, [SYSTEM, {"role": "user", "content": "Stay here."}])
        run(engine, prompt, slot=0)
        held = engine.slot_tokens(0)
        run(engine, chat_tokens(lfm, [{"role": "user", "content": "Meanwhile, something else."}]), slot=1)
        assert engine.slot_tokens(0) == held and engine.ram_cache.entries == ()
        assert run(engine, prompt, slot=0).n_cached_tokens == len(prompt)
    finally:
        engine.close()


def test_a_saved_slot_continues_exactly_where_it_stopped(engine: Engine, lfm: NativeModel, tmp_path: Path) -> None:
    messages = [SYSTEM, *turn(1), {"role": "user", "content": "Keep going."}]
    prompt = chat_tokens(lfm, messages)
    run(engine, prompt, slot=0, n=1)  # the slot now holds exactly the prompt
    n_saved, n_written = engine.save_slot(0, str(tmp_path / "slot0.bin"))
    assert n_saved == len(prompt) and n_written > 0
    assert engine.clear_slot(0) == len(prompt) and engine.slot_tokens(0) == []
    n_restored, n_read = engine.restore_slot(0, str(tmp_path / "slot0.bin"))
    assert (n_restored, n_read) == (len(prompt), n_written) and engine.slot_tokens(0) == list(prompt)
    longer = prompt + chat_tokens(lfm, [{"role": "user", "content": "more"}])[1:]
    out = run(engine, longer, slot=0)
    assert out.n_cached_tokens == len(prompt) and out.token_ids == uncached(engine, longer, 1)


def test_the_same_tokens_alone_and_batched_with_others(engine: Engine, lfm: NativeModel) -> None:
    prompts = [
        chat_tokens(lfm, [{"role": "user", "content": text}])
        for text in ("Hello there", "Tell me a story about a cat " * 6, "Weather in Paris?", "My name is Ada. " * 12)
    ]
    alone = [uncached(engine, p, 0) for p in prompts]
    streams = [SyncStream() for _ in prompts]
    for i, (p, s) in enumerate(zip(prompts, streams, strict=True)):
        engine.submit(EngineRequest(prompt_tokens=p, sampling=GREEDY, max_tokens=8 + i, cache_prompt=False), s)
    together = [tuple(t for o in s for t in o.token_ids) for s in streams]
    assert [t[:8] for t in together] == [a[:8] for a in alone]


@pytest.fixture(scope="module")
def gemma(gemma_gguf: Path) -> Iterator[tuple[NativeModel, Engine]]:
    model = NativeModel(gemma_gguf)
    engine = make_engine(model, n_ctx=4096, n_slots=2)
    yield model, engine
    engine.close()
    model.close()


def test_sliding_window_model_uses_the_same_checkpoints(gemma: tuple[NativeModel, Engine]) -> None:
    model, engine = gemma
    story = "The Eiffel Tower is located in the city of Paris, and it was built in 1889. " * 16
    base = tuple(model.tokenize(story, add_special=True, parse_special=True))
    assert len(base) > 300
    first = run(engine, base, slot=0)
    assert run(engine, base, slot=0).n_cached_tokens == len(base)
    edited = base[:280] + tuple(model.tokenize(" Then it rained for days.", add_special=False, parse_special=False))
    out = run(engine, edited, slot=0)
    assert out.n_cached_tokens == 256  # the every-256-tokens checkpoint before the edit
    assert out.token_ids == uncached(engine, edited, 1)
    copied = run(engine, base, slot=1)
    assert copied.n_cached_tokens == 256 and copied.token_ids == first.token_ids


def test_sliding_window_model_gives_the_same_tokens_alone_and_batched(gemma: tuple[NativeModel, Engine]) -> None:
    model, engine = gemma
    prompts = [
        tuple(model.tokenize(t, add_special=True, parse_special=True))
        for t in ("The capital of France is", "Once upon a time, in a small village by the sea,")
    ]
    alone = [uncached(engine, p, 0) for p in prompts]
    streams = [SyncStream() for _ in prompts]
    for p, s in zip(prompts, streams, strict=True):
        engine.submit(EngineRequest(prompt_tokens=p, sampling=GREEDY, max_tokens=8, cache_prompt=False), s)
    assert [tuple(t for o in s for t in o.token_ids) for s in streams] == alone


def test_cache_reuse_shifts_a_repeated_run_into_place_on_an_attention_only_model(tiny_llama_gguf: Path) -> None:
    model = NativeModel(tiny_llama_gguf)
    shifting = make_engine(model, n_slots=1, cache_reuse=16)
    plain = make_engine(model, n_slots=1)
    try:
        assert shifting.shifts_kv and not plain.shifts_kv
        words = [
            tuple(model.tokenize(f" part {name} " + "and more words " * 10, add_special=False, parse_special=False))
            for name in "abcd"
        ]
        bos = tuple(model.tokenize("", add_special=True, parse_special=False))
        first = bos + words[0] + words[1] + words[2]
        trimmed = bos + words[0] + words[2] + words[3]  # the middle part cut out
        for engine in (shifting, plain):
            run(engine, first)
        moved = run(shifting, trimmed)
        reused = len(bos + words[0] + words[2])
        shared = common_prefix_length(first, trimmed)  # " part " begins both the cut part and the moved one
        assert moved.n_cached_tokens == reused and shifting.stats.n_shifted_tokens == reused - shared
        assert moved.timings.prompt_n == len(words[3]) and moved.n_decoded == 8
        assert shifting.slot_tokens(0)[: len(trimmed)] == list(trimmed)
        assert run(plain, trimmed).n_cached_tokens == shared
    finally:
        shifting.close()
        plain.close()
    parking = make_engine(model, n_slots=2, cache_reuse=16)
    try:  # a sequence parked in RAM comes back whole, then shifts the same way
        run(parking, first, slot=0)
        run(parking, bos + words[3], slot=1)
        assert parking.slot_tokens(0) == []
        back = run(parking, trimmed, slot=0)
        assert parking.stats.n_ram_restores == 1 and back.n_cached_tokens == reused
    finally:
        parking.close()
        model.close()


def test_cache_reuse_is_off_for_hybrid_and_sliding_window_models(
    lfm: NativeModel, gemma: tuple[NativeModel, Engine]
) -> None:
    hybrid = make_engine(lfm, n_slots=1, cache_reuse=16)
    swa = make_engine(gemma[0], n_slots=1, cache_reuse=16)
    try:
        assert not hybrid.shifts_kv and not swa.shifts_kv
    finally:
        hybrid.close()
        swa.close()
