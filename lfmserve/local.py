"""In-process chat and embeddings, for apps that cannot spawn a server: what the server does, without HTTP.

A :class:`Model` is the server's own serving logic (:class:`~lfmserve.chat.serving.Serving`, loaded by
:func:`~lfmserve.models.loader.load_serving`) with its engine thread, so a turn is rendered, planned
(tools, ``tool_choice``, ``response_format``), tokenized with its media, sampled and parsed (reasoning,
LFM tool calls) exactly as ``/v1/chat/completions`` does, and replies come back as the same
:mod:`lfmserve.results` records the HTTP client returns.

Each turn renders the whole history with the chat template, prefills only the suffix the cache does not
hold yet, streams the reply until end of generation, then prefills the end-of-turn tokens so the cache
equals the next turn's render exactly. :meth:`Chat.reset` forgets the conversation without reloading.

Example::

    with lfmserve.Model("LFM2.5-1.2B-Instruct-Q4_K_M.gguf") as model:
        chat = model.chat(system="You are a helpful assistant.")
        print(chat.send("My name is Ada."))
        for piece in chat.stream("What is my name?", temperature=0.1):
            print(piece, end="", flush=True)

Tools: a call is parsed into :class:`~lfmserve.results.ToolCall` (arguments as a dict); answer it with
:meth:`Chat.add_tool_result`, then :meth:`Chat.reply` with no text lets the model go on::

    chat = model.chat(tools=[WEATHER_TOOL])        # OpenAI function tools, for every turn
    result = chat.reply("Weather in Paris?", tool_choice="required")
    for call in result.tool_calls:
        chat.add_tool_result(call, {"temp_c": 21})
    print(chat.reply().content)

Images and audio (with a projector), structured output, thinking::

    with lfmserve.Model("LFM2-VL-450M-Q8_0.gguf", mmproj="mmproj-LFM2-VL-450M-Q8_0.gguf") as model:
        print(model.chat().send("Describe it.", images=["photo.jpg"]))
        review = model.chat().reply("Review it.", images=[png_bytes], response_format=Review).parsed
        why = model.chat().reply("Why is the sky blue?", thinking=True).reasoning   # the <think> text

Embeddings, normalised as the server's ``--embd-normalize 2``::

    with lfmserve.Model("embedder.gguf", embeddings=True) as model:
        vectors = model.embed(texts=["a cat", "a dog"])    # float32, shape (2, n_embd)

Why synchronous without an event loop: :class:`Serving`'s preparation (plan, render, tokenize, media
decode) is plain code, and only its waiting is async; the engine thread already decouples the caller, so
the in-process API waits on a :class:`~lfmserve.engine.stream.SyncStream` (or ``SyncResult``) instead of
running a private loop on another thread, which would add a thread hop per token and make ``break``
reach the engine through that loop. Media come as bytes, paths or PIL images, never URLs, so nothing is
fetched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, get_args

import numpy as np
import numpy.typing as npt

from .chat.embeddings import EmbeddingInput
from .chat.media import chat_media_sources
from .chat.output import AssistantOutputParser
from .chat.request import ChatRequest, ContentPart, ContentPrompt, EmbeddingOptions
from .chat.serving import Serving
from .chat.template import ChatFormatter
from .engine.core import Engine
from .engine.embeddings import EmbeddingResult
from .engine.records import EngineOutput, EngineRequest, Pooling, SamplingParams
from .engine.stream import SyncResult, SyncStream
from .errors import ContextLengthExceeded, InvalidRequest, NotSupported
from .llama.model import ModelInfo
from .llama.mtmd import Media
from .local_turn import (
    AudioInput,
    ImageInput,
    Reply,
    generation_options,
    history_messages,
    media_items,
    media_part,
    read_media,
    tool_choice,
    tool_list,
)
from .models.loader import ModelFiles, load_serving
from .response_format import output_schema, wire_format
from .results import ChatResult, ContentDelta, FinalMessage, Stats, StreamEvent, ToolCall
from .settings import Settings, sampling_fields


@dataclass(frozen=True, slots=True)
class TurnStats:
    """What one turn cost: the prompt, what the cache already had, what was prefilled and generated."""

    n_prompt_tokens: int
    n_cached_tokens: int
    n_prefilled: int
    n_generated: int
    n_closing_tokens: int
    finish_reason: str | None


class Model:
    """A GGUF loaded in this process, with its own engine thread (one slot per concurrent chat).

    ``mmproj``: a multimodal projector GGUF, for ``images=`` and ``audio=``. ``embeddings``: also load an
    embedding context for :meth:`embed`, pooled as ``pooling`` says (the server's ``--pooling``; None: the
    model's). Other keywords are sampling defaults under the request names (``temperature=0.2``).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        n_ctx: int = 4096,
        n_parallel: int = 1,
        n_threads: int | None = None,
        chat_template_file: str | None = None,
        mmproj: str | Path | None = None,
        embeddings: bool = False,
        pooling: Pooling | None = None,
        **sampling_defaults_: Any,
    ) -> None:
        if pooling is not None and pooling not in get_args(Pooling):
            raise ValueError(f"pooling is one of {', '.join(get_args(Pooling))}, not {pooling!r}")
        settings = Settings(
            model=str(path),
            mmproj=str(mmproj) if mmproj is not None else None,
            ctx_size=n_ctx,
            parallel=n_parallel,
            chat_template_file=chat_template_file,
            embeddings=embeddings,
            pooling=pooling,
            **_sampling_defaults(sampling_defaults_),
        )
        settings = dataclasses.replace(settings, threads=n_threads) if n_threads else settings
        self._load(settings, ModelFiles(str(path), settings.mmproj))

    @classmethod
    def from_settings(cls, settings: Settings, files: ModelFiles | None = None) -> Model:
        """A model loaded as ``lfmserve`` with these settings would load it: every server flag applies (context,
        batch, KV cache types, templates, reasoning format...). ``files``: already resolved (``-hf``)."""
        model = cls.__new__(cls)
        assert settings.model is not None or files is not None, "settings.model or files"
        model._load(settings, files or ModelFiles(str(settings.model), settings.mmproj))
        return model

    def _load(self, settings: Settings, files: ModelFiles) -> None:
        self.settings = settings
        #: The server's serving logic for this model: template, defaults, grammars, media reader, engine.
        self.serving: Serving = load_serving(settings, files)
        self._next_slot = 0

    @property
    def engine(self) -> Engine:
        return self.serving.engine

    @property
    def template(self) -> ChatFormatter:
        return self.serving.template

    @property
    def defaults(self) -> SamplingParams:
        """The sampling a turn gets for what it does not set (the model's GGUF, its family's, then ours)."""
        return self.serving.defaults.params

    @property
    def info(self) -> ModelInfo:
        return self.serving.model.info

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        return self.serving.model.tokenize(text, add_special=add_special, parse_special=parse_special)

    def tokenize_chat(self, text: str) -> list[int]:
        """A rendered chat prompt's tokens, as the engine sees them."""
        return self.serving.model.tokenize_chat(text)

    def chat(self, system: str | None = None, tools: Sequence[Mapping[str, Any]] | None = None) -> Chat:
        """A new conversation in the next slot (round robin over ``n_parallel`` slots); ``tools`` (OpenAI function
        tools) are offered on every turn that does not give its own."""
        slot, self._next_slot = self._next_slot, (self._next_slot + 1) % self.engine.n_slots
        return Chat(self, system, slot, tools=tools)

    def embed(self, texts: Sequence[str] = (), images: Sequence[ImageInput] = ()) -> npt.NDArray[np.float32]:
        """One vector per input, texts first, then images: float32, shape ``(n, n_embd)``, normalised as the server
        normalises by default (Euclidean). A text is tokenized as ``/v1/embeddings`` tokenizes ``input``, an image
        as a ``{"content": [image part]}`` input (it needs ``mmproj``).

        Example::

            vectors = model.embed(texts=["a cat", "a dog"])
            similarity = float(vectors[0] @ vectors[1])
        """
        serving = self.serving
        if serving.pooling is None:
            raise NotSupported("this model was loaded without embeddings: Model(path, embeddings=True)")
        if serving.pooling == "none":
            raise InvalidRequest("Pooling type 'none' gives a vector per token, not per input: use another pooling")
        texts = [texts] if isinstance(texts, str) else list(texts)
        media = read_media(serving.media, media_items(images, ()))
        inputs: list[EmbeddingInput] = [*texts, *(ContentPrompt((ContentPart("image"),)) for _ in media)]
        request = serving.embedding_request(inputs, EmbeddingOptions(), [[] for _ in texts] + [[m] for m in media])
        sink: SyncResult[EmbeddingResult] = SyncResult()
        self.engine.submit_embeddings(request, sink)
        try:
            result = sink.result()
        except BaseException:  # interrupted: the engine stops embedding it
            self.engine.cancel_embeddings(sink)
            raise
        return np.stack(result.vectors).astype(np.float32, copy=False)

    def close(self) -> None:
        self.serving.close()

    def __enter__(self) -> Model:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@dataclass(slots=True)
class _Turn:
    """A turn as prepared, before anything is submitted: nothing of it is in the history yet."""

    request: ChatRequest
    engine_request: EngineRequest
    parser: AssistantOutputParser
    #: The new user message, if the turn has one, and the media its placeholders stand for.
    user: dict[str, Any] | None
    new_media: dict[str, Media]
    parse_as: Any


class Chat:
    """One conversation; its history lives here and its cache in one engine slot.

    :attr:`messages` is the history as OpenAI messages; a media item is kept there as a placeholder URL
    (``lfmserve-media:N``) and decoded once, here. Every turn method takes the same keywords:

    - ``images``, ``audio``: bytes, file paths (and PIL images) joining the new user message after its text.
    - ``tools``: OpenAI function tools for this turn (default: the chat's); ``tool_choice``: ``auto`` (default),
      ``none``, ``required``, or ``{"type": "function", "function": {"name": ...}}``; the last two constrain the
      answer to a call.
    - ``response_format``: OpenAI's dict, a bare JSON schema, or a pydantic model class (its instance in
      :attr:`~lfmserve.results.ChatResult.parsed`). As on the server, it does not combine with tools: give such a
      turn ``tool_choice="none"`` in a chat that has some.
    - ``thinking``: the template's ``enable_thinking`` (None: the template's default).
    - sampling: ``temperature=…``, ``max_tokens=…``, ``stop=…``, ``logit_bias=…`` and the other
      :class:`~lfmserve.engine.records.SamplingParams` names.
    """

    def __init__(
        self, model: Model, system: str | None, slot: int, *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> None:
        self.model = model
        self.slot = slot
        self.system = system
        self.tools = tool_list(tools or ())
        self.messages: list[dict[str, Any]] = []
        self.last_turn: TurnStats | None = None
        self._media: dict[str, Media] = {}
        self._media_ids = itertools.count()
        #: The tools and template variables of the last turn: the closed history is rendered with them.
        self._shape = ChatRequest(messages=())
        self.reset()

    def reset(self) -> None:
        """Start over: drop the history and the slot's cache; the model stays loaded."""
        self.messages = [{"role": "system", "content": self.system}] if self.system else []
        self._media = {}
        self._shape = ChatRequest(messages=(), tools=self.tools)
        self.model.engine.clear_slot(self.slot)
        self.last_turn = None

    def add_tool_result(self, call: ToolCall | str, content: Any) -> None:
        """Answer a tool call (the :class:`~lfmserve.results.ToolCall`, or its id) for the next :meth:`reply`;
        ``content`` that is not text is sent as JSON."""
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        call_id = call.id if isinstance(call, ToolCall) else call
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})

    def reply(
        self,
        text: str | None = None,
        *,
        images: Sequence[ImageInput] = (),
        audio: Sequence[AudioInput] = (),
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        response_format: Any = None,
        thinking: bool | None = None,
        **sampling: Any,
    ) -> ChatResult:
        """Send a user message (None: none, the model answers the tool results added last) and return the whole
        reply: content, reasoning, tool calls, usage and timings.

        Example::

            result = chat.reply("Weather in Paris?", tools=[WEATHER_TOOL], tool_choice="required")
            call = result.tool_calls[0]   # ToolCall(id='call_…', name='get_weather', arguments={'city': 'Paris'})
        """
        keywords = dict(tools=tools, tool_choice=tool_choice, response_format=response_format, thinking=thinking)
        final = None
        for event in self.events(text, images=images, audio=audio, **keywords, **sampling):
            final = event
        assert isinstance(final, FinalMessage)
        return final.result

    def events(
        self,
        text: str | None = None,
        *,
        images: Sequence[ImageInput] = (),
        audio: Sequence[AudioInput] = (),
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        response_format: Any = None,
        thinking: bool | None = None,
        **sampling: Any,
    ) -> Generator[StreamEvent, None, None]:
        """The reply as it is generated: content, reasoning and tool-call deltas, then :class:`Stats`, then the
        :class:`FinalMessage`. Nothing runs until the first event is asked for; a refused turn (bad media, too
        long) raises there and leaves the history as it was.

        Stopping early (``break``, an exception, dropping the iterator) cancels the generation at once; the
        history then keeps the reply as far as it was given out.
        """
        turn = self._turn(text, images, audio, tools, tool_choice, response_format, thinking, sampling)
        yield from self._run(turn)

    def send(self, text: str | None = None, **keywords: Any) -> str:
        """Send a user message and return the reply's content (:meth:`reply`'s keywords)."""
        return self.reply(text, **keywords).content or ""

    def stream(self, text: str | None = None, **keywords: Any) -> Iterator[str]:
        """Send a user message and yield the reply's content as it is generated (:meth:`events`' keywords)."""
        with contextlib.closing(self.events(text, **keywords)) as events:
            for event in events:
                if isinstance(event, ContentDelta):
                    yield event.text

    def cached_tokens(self) -> list[int]:
        """The tokens the slot's cache holds now (media positions hold their ids, as the engine keeps them)."""
        return self.model.engine.slot_tokens(self.slot)

    def rendered_tokens(self) -> list[int]:
        """The tokenized render of the history as it stands, every turn closed (what the cache should equal)."""
        return list(self._history_prefill().prompt_tokens)

    # -- a turn ----------------------------------------------------------------------------------
    def _turn(
        self,
        text: str | None,
        images: Sequence[ImageInput],
        audio: Sequence[AudioInput],
        tools: Sequence[Mapping[str, Any]] | None,
        choice: str | Mapping[str, Any] | None,
        response_format: Any,
        thinking: bool | None,
        sampling: Mapping[str, Any],
    ) -> _Turn:
        """Check and prepare everything (media decoded, prompt planned and tokenized) without touching the history."""
        serving = self.model.serving
        options = generation_options(sampling, id_slot=self.slot)
        wire, parse_as = wire_format(response_format)
        items = media_items(images, audio)
        decoded = read_media(serving.media, items)
        new_media = {f"lfmserve-media:{next(self._media_ids)}": media for media in decoded}
        parts = [media_part(kind, key) for (kind, _, _), key in zip(items, new_media, strict=True)]
        user = _user_message(text, parts) if text is not None or parts else None
        messages = [*self.messages, user] if user is not None else self.messages
        if user is None and (not messages or messages[-1].get("role") not in ("user", "tool")):
            raise InvalidRequest("reply() without text answers tool results: add them with add_tool_result()")
        request = ChatRequest(
            messages=history_messages(messages),
            tools=tool_list(tools) if tools is not None else self.tools,
            tool_choice=tool_choice(choice),
            response_schema=output_schema(wire) if wire is not None else None,
            template_kwargs={"enable_thinking": thinking} if thinking is not None else {},
            generation=options,
        )
        engine_request, parser = serving.prepare_chat(request, self._request_media(request, new_media))
        return _Turn(request, engine_request, parser, user, new_media, parse_as)

    def _run(self, turn: _Turn) -> Generator[StreamEvent, None, None]:
        engine = self.model.engine
        stream = SyncStream()
        request_id = engine.submit(turn.engine_request, stream)
        if turn.user is not None:
            self.messages.append(turn.user)
            self._media.update(turn.new_media)
        request = turn.request
        # the closed history is rendered as this turn was: with its tools (none when the template saw none)
        self._shape = dataclasses.replace(request, tools=() if request.tool_choice == "none" else request.tools)
        self.last_turn = None
        reply = Reply(turn.parse_as)
        last: EngineOutput | None = None
        try:
            for out in stream:
                last = out
                for delta in turn.parser.feed(out.text) + (turn.parser.finish() if out.finished else []):
                    yield reply.event(delta)
        finally:
            if last is None or not last.finished:
                engine.cancel(request_id)
            self.messages.append(reply.message())
        assert last is not None
        n_closing = self._close_turn()
        self.last_turn = TurnStats(
            n_prompt_tokens=len(turn.engine_request.prompt_tokens),
            n_cached_tokens=last.n_cached_tokens,
            n_prefilled=last.timings.prompt_n,
            n_generated=last.n_decoded,
            n_closing_tokens=n_closing,
            finish_reason=last.finish_reason,
        )
        result = reply.result(last)
        yield Stats(result.usage, result.timings)
        yield FinalMessage(result)

    def _request_media(self, request: ChatRequest, new_media: Mapping[str, Media]) -> list[Media]:
        """The decoded media of every media part in the request, in prompt order."""
        media = []
        for _, source, param in chat_media_sources(request):
            found = new_media.get(source) or self._media.get(source)
            if found is None:
                raise InvalidRequest(
                    f"{param}: media in an in-process chat come through images= or audio= (got {source[:60]!r})",
                    param=param,
                )
            media.append(found)
        return media

    def _history_prefill(self) -> EngineRequest:
        """A prefill of the closed history into the slot (no generation)."""
        request = dataclasses.replace(self._shape, messages=history_messages(self.messages))
        tokens, spans = self.model.serving.history_tokens(request, self._request_media(request, {}))
        return EngineRequest(prompt_tokens=tuple(tokens), media=spans, max_tokens=0, id_slot=self.slot)

    def _close_turn(self) -> int:
        """Bring the cache to the render of the history (the end-of-turn tokens, and any re-tokenization)."""
        stream = SyncStream()
        try:
            self.model.engine.submit(self._history_prefill(), stream)
        except ContextLengthExceeded:  # the reply filled the slot: the next turn is refused as too long anyway
            return 0
        return list(stream)[-1].timings.prompt_n


def _user_message(text: str | None, media: list[dict[str, Any]]) -> dict[str, Any]:
    """A user message: its text, then its media parts (as the HTTP client places them)."""
    if not media:
        return {"role": "user", "content": text}
    return {"role": "user", "content": [*([{"type": "text", "text": text}] if text is not None else []), *media]}


def _sampling_defaults(values: dict[str, Any]) -> dict[str, Any]:
    """``Model(temperature=0.2)``: the sampling defaults Settings can hold, under the same names."""
    unknown = set(values) - set(sampling_fields())
    if unknown:
        raise TypeError(f"unknown Model options: {', '.join(sorted(unknown))}")
    return values
