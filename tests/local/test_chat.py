"""The in-process API: per turn, only the new suffix is prefilled and the cache equals the render."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lfmserve
from lfmserve.errors import ContextLengthExceeded
from lfmserve.results import ContentDelta
from lfmserve.settings import Settings
from lfmserve.testing import EOS_ID


@pytest.fixture(scope="module")
def model(tiny_gguf: Path) -> Iterator[lfmserve.Model]:
    with lfmserve.Model(tiny_gguf, n_ctx=2048, n_threads=2) as m:
        yield m


def test_each_turn_prefills_only_its_suffix_and_the_cache_equals_the_render(model: lfmserve.Model) -> None:
    chat = model.chat(system="You are a helpful assistant.")
    n_before = 0
    for question in ["My name is Ada.", "What is my name?", "Tell me a story about a cat."]:
        history_tokens = (
            chat.rendered_tokens() if chat.messages[-1:] and chat.messages[-1]["role"] == "assistant" else []
        )
        reply = chat.send(question, temperature=0, max_tokens=10)
        turn = chat.last_turn
        assert turn is not None and turn.n_generated == 10 and isinstance(reply, str)
        # the suffix: this turn's prompt minus the previous turn's closed render, which the cache held
        assert turn.n_cached_tokens == len(history_tokens) == n_before
        assert turn.n_prefilled == turn.n_prompt_tokens - n_before
        assert chat.cached_tokens() == chat.rendered_tokens()
        assert chat.messages[-1] == {"role": "assistant", "content": reply}
        n_before = len(chat.cached_tokens())


def test_a_clean_reply_closes_the_turn_with_just_the_end_of_turn_tokens(model: lfmserve.Model) -> None:
    # Biasing towards plain merged tokens makes the reply re-tokenize to exactly what was generated.
    words = model.tokenize(" the", parse_special=False) + model.tokenize(" ocean", parse_special=False)
    chat = model.chat()
    chat.send("Hi", temperature=0, max_tokens=6, logit_bias=tuple((t, 50.0) for t in words))
    turn = chat.last_turn
    assert turn is not None and turn.finish_reason == "length"
    # Stopped by max_tokens, the last sampled token was never decoded: it, <|im_end|> and "\n" close the turn.
    assert turn.n_closing_tokens == 1 + len(model.tokenize("<|im_end|>\n")) == 3
    assert chat.cached_tokens() == chat.rendered_tokens()


def test_stream_yields_the_same_text_as_send(model: lfmserve.Model) -> None:
    a, b = model.chat(), model.chat()
    assert "".join(a.stream("Hello", temperature=0, max_tokens=12)) == b.send("Hello", temperature=0, max_tokens=12)


def test_end_of_generation_stops_the_turn(model: lfmserve.Model) -> None:
    chat = model.chat()
    assert chat.send("Hi", temperature=0, logit_bias=((EOS_ID, 100.0),)) == ""
    assert chat.last_turn is not None and chat.last_turn.finish_reason == "stop"
    assert chat.cached_tokens() == chat.rendered_tokens()


def test_reset_forgets_without_reloading(model: lfmserve.Model) -> None:
    chat = model.chat(system="Be brief.")
    first = chat.send("Hi", temperature=0, max_tokens=5)
    chat.reset()
    assert chat.cached_tokens() == [] and chat.messages == [{"role": "system", "content": "Be brief."}]
    assert chat.send("Hi", temperature=0, max_tokens=5) == first
    assert chat.last_turn is not None and chat.last_turn.n_cached_tokens == 0


def test_unknown_options_are_refused(model: lfmserve.Model) -> None:
    with pytest.raises(TypeError, match="unknown sampling options: warmth"):
        model.chat().send("Hi", warmth=3)


@pytest.fixture(scope="module")
def endless(tiny_llama_gguf: Path) -> Iterator[lfmserve.Model]:
    """One slot on an attention-only model with ``--context-shift``: an :data:`ENDLESS` turn never ends by itself,
    so however late the consumer stops, the generation is still running and only its cancel ends it."""
    settings = Settings.of(model=str(tiny_llama_gguf), ctx_size=512, parallel=1, threads=1, context_shift=True)
    with lfmserve.Model.from_settings(settings) as m:
        yield m


def _assert_freed(model: lfmserve.Model, slot: int) -> None:
    """The slot's generation stops (it never ends by itself: only the cancel ends it)."""
    deadline = time.monotonic() + 120  # a deadline only a generation that goes on reaches
    while model.engine.slot_request(slot) is not None:
        assert time.monotonic() < deadline, "the generation went on after its consumer stopped"
        time.sleep(0.01)


ENDLESS: dict[str, Any] = {"temperature": 0, "ignore_eos": True}  # and no max_tokens


def test_breaking_out_of_a_stream_cancels_it_and_keeps_the_reply_so_far(endless: lfmserve.Model) -> None:
    chat = endless.chat()
    pieces = []
    for piece in chat.stream("Go on", **ENDLESS):
        pieces.append(piece)
        if len(pieces) == 3:
            break
    _assert_freed(endless, chat.slot)
    assert chat.messages == [{"role": "user", "content": "Go on"}, {"role": "assistant", "content": "".join(pieces)}]
    assert chat.last_turn is None
    chat.send("And?", temperature=0, max_tokens=3)  # the conversation goes on from there
    assert chat.last_turn is not None and chat.last_turn.n_generated == 3


def test_breaking_out_of_events_cancels_and_keeps_what_was_given_out(endless: lfmserve.Model) -> None:
    chat = endless.chat()
    shown = []
    for event in chat.events("Go on", **ENDLESS):
        assert isinstance(event, ContentDelta)
        shown.append(event.text)
        if len(shown) == 2:
            break
    _assert_freed(endless, chat.slot)
    assert chat.messages == [{"role": "user", "content": "Go on"}, {"role": "assistant", "content": "".join(shown)}]
    assert chat.last_turn is None


def test_an_exception_in_the_consumer_cancels_the_stream(endless: lfmserve.Model) -> None:
    chat = endless.chat()
    with pytest.raises(KeyboardInterrupt):
        for _ in chat.stream("Go on", **ENDLESS):
            raise KeyboardInterrupt
    _assert_freed(endless, chat.slot)


def test_a_stream_dropped_unfinished_is_cancelled(endless: lfmserve.Model) -> None:
    chat = endless.chat()
    pieces = chat.stream("Go on", **ENDLESS)
    next(pieces)
    del pieces
    gc.collect()
    _assert_freed(endless, chat.slot)


def test_a_refused_message_leaves_the_history_as_it_was(model: lfmserve.Model) -> None:
    chat = model.chat(system="Be brief.")
    with pytest.raises(ContextLengthExceeded):
        chat.send("word " * 3000)
    assert chat.messages == [{"role": "system", "content": "Be brief."}]


def test_every_sampler_is_a_keyword_of_a_turn_and_of_the_model(tiny_gguf: Path) -> None:
    """The in-process API takes the request fields by name; ``samplers`` as letters or names."""
    with lfmserve.Model(tiny_gguf, n_ctx=512, n_threads=1, mirostat=2, samplers="kt", dry_sequence_breakers=["#"]) as m:
        assert (m.defaults.mirostat, m.defaults.samplers, m.defaults.dry_sequence_breakers) == (
            2,
            ("top_k", "temperature"),
            ("#",),
        )
        greedy = {"temperature": 0, "max_tokens": 6, "mirostat": 0}
        plain = m.chat().send("Hi", **greedy)
        # XTC before a zero temperature drops the most likely tokens: greedy no more.
        dropped = m.chat().send("Hi", **greedy, xtc_probability=1.0, xtc_threshold=0.001, samplers=["xtc", "temp"])
        assert dropped != plain
        assert m.chat().send("Hi", **greedy, xtc_probability=1.0, samplers=["temp", "xtc"]) == plain
        with pytest.raises(lfmserve.InvalidRequest, match="unknown sampler letter 'z'"):
            m.chat().send("Hi", samplers="kz")
