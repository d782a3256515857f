"""The chat layer's serving logic, without HTTP: prompts to engine requests, defaults, biases, and their 400s."""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from lfmserve.chat.request import ChatRequest, ContentPart, GenerationOptions, Message
from lfmserve.chat.serving import Serving
from lfmserve.engine.records import EngineRequest
from lfmserve.errors import InvalidRequest
from lfmserve.loading.loader import load_serving
from lfmserve.settings import Settings


@pytest.fixture(scope="module")
def serving(tiny_gguf: Path) -> Iterator[Serving]:
    loaded = load_serving(
        Settings.of(model=str(tiny_gguf), ctx_size=1024, parallel=1, threads=1, n_predict=32), str(tiny_gguf)
    )
    yield loaded
    loaded.engine.close()


def test_an_engine_request_layers_the_request_over_the_defaults(serving: Serving) -> None:
    plain = serving.engine_request(GenerationOptions(), [1, 2])
    assert (plain.max_tokens, plain.n_probs, plain.stop, plain.cache_prompt, plain.id_slot) == (32, 0, (), True, -1)
    assert plain.sampling == serving.defaults.params
    options = GenerationOptions(sampling={"temperature": 0.0, "seed": 5}, max_tokens=3, stop=("x",), n_probs=0)
    request = serving.engine_request(options, [1, 2])
    assert (request.sampling.temperature, request.sampling.seed, request.max_tokens, request.stop) == (
        0.0,
        5,
        3,
        ("x",),
    )
    assert request.n_probs == 1  # "only the chosen token's" still needs one alternative computed
    assert request.sampling.min_p == serving.defaults.params.min_p  # what the request did not set


def test_logit_bias_takes_ids_text_and_false(serving: Serving) -> None:
    hello = serving.model.tokenize("Hello", add_special=False, parse_special=False)
    options = GenerationOptions(logit_bias=(("12", 2.0), (13, False), ("Hello", -1.0)))
    bias = serving.engine_request(options, [1]).sampling.logit_bias
    assert bias[:2] == ((12, 2.0), (13, -math.inf)) and bias[2:] == tuple((t, -1.0) for t in hello)
    with pytest.raises(InvalidRequest, match="logit_bias token id 475 is out of range") as info:
        serving.engine_request(GenerationOptions(logit_bias=((475, 1.0),)), [1])
    assert info.value.param == "logit_bias"
    with pytest.raises(InvalidRequest, match=r"logit_bias entries must be \[token, bias\] pairs") as info:
        serving.engine_request(GenerationOptions(logit_bias=((1, 2.0, 3),)), [1])
    assert info.value.param == "logit_bias"


def test_a_mixed_prompt_tokenizes_its_text_in_place(serving: Serving) -> None:
    model = serving.model
    text = model.tokenize("Once", add_special=True, parse_special=True)
    more = model.tokenize(" upon", add_special=False, parse_special=True)
    assert serving.tokenize_prompt("Once") == text
    assert serving.tokenize_prompt(["Once", 99, " upon"]) == [*text, 99, *more]
    assert serving.tokenize_prompt([5, "Once"]) == [5, *model.tokenize("Once", add_special=False, parse_special=True)]


def test_a_stream_follows_one_prompt(serving: Serving) -> None:
    assert len(serving.prepare_completion(["a", "b"], GenerationOptions(), stream=False)) == 2
    with pytest.raises(InvalidRequest, match="streaming is supported for a single prompt only"):
        serving.prepare_completion(["a", "b"], GenerationOptions(), stream=True)


def test_media_without_a_projector_is_llama_servers_message_naming_the_part(serving: Serving) -> None:
    parts = (ContentPart("text", "Look"), ContentPart("image", source="data:image/png;base64,AAAA"))
    request = ChatRequest(messages=(Message(role="user", content=parts),))
    for attempt in (lambda: asyncio.run(serving.read_media(request)), lambda: serving.render_chat(request)):
        with pytest.raises(InvalidRequest) as info:
            attempt()
        assert str(info.value) == (
            "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
        )
        assert info.value.param == "messages.0.content.1"
    with pytest.raises(InvalidRequest, match="media have not been read"):
        serving.prepare_chat(request)


def test_a_chat_becomes_its_rendered_prompts_tokens(serving: Serving) -> None:
    request = ChatRequest(messages=(Message(role="user", content="Hi"),))
    engine_request, _ = serving.prepare_chat(request)
    rendered = serving.render_chat(request)
    assert rendered == "<|startoftext|><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert list(engine_request.prompt_tokens) == serving.model.tokenize_chat(rendered)


def test_detokenize_refuses_ids_outside_the_vocabulary(serving: Serving) -> None:
    assert serving.detokenize([6]) == "<|im_start|>"
    with pytest.raises(InvalidRequest, match="Invalid token id 475") as info:
        serving.detokenize([6, 475])
    assert info.value.param == "tokens"


def test_a_refused_prompt_of_several_cancels_the_others(tiny_llama_gguf: Path) -> None:
    """Before, the first prompt of ``["ok", [1, 99999]]`` went on generating after the client had its 400. The
    first is endless here (context shift, ``ignore_eos``, no max_tokens): only the cancel can end it. The cancel's
    own error, which nobody awaits, is dropped: before, the loop reported "Future exception was never retrieved"."""
    settings = Settings.of(model=str(tiny_llama_gguf), ctx_size=512, parallel=1, threads=1, context_shift=True)
    endless_serving = load_serving(settings, str(tiny_llama_gguf))
    engine = endless_serving.engine
    reported: list[str] = []

    async def refuse(endless: EngineRequest, refused: EngineRequest) -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, context: reported.append(context["message"]))
        with pytest.raises(InvalidRequest, match="Invalid token id 99999"):
            await endless_serving.run_all([endless, refused])
        # On this loop, so that the cancel's error, which the engine delivers to it, lands in its future.
        deadline = time.monotonic() + 120  # a deadline only an engine that goes on generating reaches
        while engine.stats.n_requests < 1 or engine.busy:
            assert time.monotonic() < deadline, "the first prompt went on generating after the 400"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)  # the delivery's wake-up, queued before this task's, has run

    try:
        good, bad = endless_serving.prepare_completion(["Go on", [1, 2]], GenerationOptions(), stream=False)
        endless = replace(good, sampling=good.sampling.updated({"ignore_eos": True}))
        assert endless.max_tokens == -1
        asyncio.run(refuse(endless, replace(bad, prompt_tokens=(1, 99999))))
        gc.collect()  # a future whose error was never read reports it as it is collected
        assert reported == []
    finally:
        engine.close()


def test_the_servers_reverse_prompts_and_cache_prompt_default_reach_every_request(tiny_gguf: Path) -> None:
    settings = Settings.of(
        model=str(tiny_gguf), parallel=1, threads=1, reverse_prompt=("User:", "x"), cache_prompt=False
    )
    served = load_serving(settings, str(tiny_gguf))
    try:
        plain = served.engine_request(GenerationOptions(), [1, 2])
        assert (plain.stop, plain.cache_prompt) == (("User:", "x"), False)
        own = served.engine_request(GenerationOptions(stop=("x", "###"), cache_prompt=True), [1, 2])
        assert (own.stop, own.cache_prompt) == (("x", "###", "User:"), True)
    finally:
        served.engine.close()
