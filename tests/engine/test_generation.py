"""One generation from its first sampled token to the output that ends it: end of generation, a stop string, a limit."""

from __future__ import annotations

import pytest

from lfmserve.engine.core import Engine
from lfmserve.engine.records import EngineConfig, EngineRequest
from lfmserve.engine.stream import SyncStream
from lfmserve.errors import ContextLengthExceeded
from lfmserve.llama.model import NativeModel
from lfmserve.testing import EOS_ID
from tests.engine.conftest import GREEDY, prompt, run, tokens_of


def test_stop_string_ends_generation_and_is_not_in_the_text(engine: Engine, model: NativeModel) -> None:
    base = EngineRequest(prompt_tokens=prompt(model, "Tell me a story."), sampling=GREEDY, max_tokens=30)
    full = "".join(o.text for o in run(engine, base))
    stop = full[10:13]
    outputs = run(engine, EngineRequest(prompt_tokens=base.prompt_tokens, sampling=GREEDY, max_tokens=30, stop=(stop,)))
    text = "".join(o.text for o in outputs)
    assert text == full[: full.index(stop)]
    assert (outputs[-1].finish_reason, outputs[-1].stop_type, outputs[-1].stopping_word) == ("stop", "word", stop)


def test_end_of_generation_and_ignore_eos(engine: Engine, model: NativeModel) -> None:
    forced = GREEDY.updated({"logit_bias": ((EOS_ID, 100.0),)})
    outputs = run(engine, EngineRequest(prompt_tokens=prompt(model, "Hi"), sampling=forced, max_tokens=10))
    assert [(o.finish_reason, o.stop_type, o.text, o.n_decoded) for o in outputs] == [("stop", "eos", "", 1)]
    ignoring = forced.updated({"ignore_eos": True})
    outputs = run(engine, EngineRequest(prompt_tokens=prompt(model, "Hi"), sampling=ignoring, max_tokens=5))
    assert outputs[-1].n_decoded == 5 and EOS_ID not in tokens_of(outputs)


def test_generation_stops_at_the_end_of_the_context(model: NativeModel) -> None:
    small = Engine(model, EngineConfig(n_ctx=256, n_slots=1, n_batch=64, n_ubatch=64, n_threads=2))
    try:
        p = prompt(model, "Hi")
        outputs = run(small, EngineRequest(prompt_tokens=p, sampling=GREEDY.updated({"ignore_eos": True})))
        assert outputs[-1].finish_reason == "length"
        assert len(p) + outputs[-1].n_decoded == small.n_ctx_slot
        with pytest.raises(ContextLengthExceeded) as exc:
            small.submit(EngineRequest(prompt_tokens=(1,) * 300), SyncStream())
        assert (exc.value.n_prompt_tokens, exc.value.n_ctx) == (300, 256)
    finally:
        small.close()
