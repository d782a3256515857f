"""One in-process conversation: its history here, its cache in one engine slot."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..chat.media import chat_media_sources
from ..chat.output import AssistantOutputParser
from ..chat.request import ChatRequest
from ..chat.serving import Serving
from ..engine.records import EngineOutput, EngineRequest
from ..engine.stream import SyncStream
from ..errors import ContextLengthExceeded, InvalidRequest
from ..llama.mtmd import Media
from ..results import ChatResult, ContentDelta, FinalMessage, Stats, StreamEvent, ToolCall, output_schema, wire_format
from .turn import (
    AudioInput,
    ImageInput,
    Reply,
    TurnStats,
    generation_options,
    history_messages,
    media_items,
    media_part,
    read_media,
    tool_choice,
    tool_list,
)


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
      :attr:`~lfmserve.results.ChatResult.parsed`). As on the server, beside tools under ``auto`` the answer is
      either calls (``parsed`` None) or JSON that follows it; ``tool_choice="none"`` makes it the JSON.
    - ``thinking``: the template's ``enable_thinking`` (None: the template's default).
    - sampling: ``temperature=…``, ``max_tokens=…``, ``stop=…``, ``logit_bias=…`` and the other
      :class:`~lfmserve.engine.records.SamplingParams` names.
    """

    def __init__(
        self, serving: Serving, system: str | None, slot: int, *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> None:
        self.serving = serving
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
        self.serving.engine.clear_slot(self.slot)
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
        return self.serving.engine.slot_tokens(self.slot)

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
        serving = self.serving
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
        engine = self.serving.engine
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
        tokens, spans = self.serving.history_tokens(request, self._request_media(request, {}))
        return EngineRequest(prompt_tokens=tuple(tokens), media=spans, max_tokens=0, id_slot=self.slot)

    def _close_turn(self) -> int:
        """Bring the cache to the render of the history (the end-of-turn tokens, and any re-tokenization)."""
        stream = SyncStream()
        try:
            self.serving.engine.submit(self._history_prefill(), stream)
        except ContextLengthExceeded:  # the reply filled the slot: the next turn is refused as too long anyway
            return 0
        return list(stream)[-1].timings.prompt_n


def _user_message(text: str | None, media: list[dict[str, Any]]) -> dict[str, Any]:
    """A user message: its text, then its media parts (as the HTTP client places them)."""
    if not media:
        return {"role": "user", "content": text}
    return {"role": "user", "content": [*([{"type": "text", "text": text}] if text is not None else []), *media]}
