"""The chat's one seam: a :class:`Conversation` answers a message with stream events and keeps the history.

:class:`RemoteConversation` talks to a running server through :class:`lfmserve.client.Client` and keeps the
OpenAI-shaped history itself; :class:`LocalConversation` wraps an in-process :class:`lfmserve.Chat`. The
terminal code sees only the Protocol, and its tests use a fake. Closing a reply's generator stops it: the
client closes its HTTP stream (the server then cancels the generation), the local chat cancels in the engine.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import LfmError
from ..results import ChatResult, ContentDelta, FinalMessage, ReasoningDelta, StreamEvent

if TYPE_CHECKING:
    from ..client import Client
    from ..local import Chat, Model

Reply = Generator[StreamEvent, None, None]


class Conversation(Protocol):
    """What the terminal needs from a chat, wherever its model runs."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The history as OpenAI messages (the system prompt first, when there is one)."""
        ...

    def reply(self, text: str, *, images: Sequence[Path] = (), audio: Sequence[Path] = ()) -> Reply:
        """Send a user message (with media) and stream the answer; closing the generator stops it, and the
        history then keeps the reply as far as it went."""
        ...

    def reset(self, system: str | None) -> None:
        """Forget the conversation and start again under ``system``."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class TurnOptions:
    """What every turn sends beside the message: the tools offered, the thinking switch (None: the model's
    default) and the request's sampling fields (``max_tokens``, ``temperature``...)."""

    tools: list[dict[str, Any]] | None = None
    thinking: bool | None = None
    sampling: Mapping[str, Any] = field(default_factory=dict)


class _Partial:
    """A reply as far as it streamed, for the history when it is stopped before its final event."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.result: ChatResult | None = None

    def feed(self, event: StreamEvent) -> None:
        if isinstance(event, ContentDelta):
            self.content.append(event.text)
        elif isinstance(event, ReasoningDelta):
            self.reasoning.append(event.text)
        elif isinstance(event, FinalMessage):
            self.result = event.result

    def message(self) -> dict[str, Any]:
        """The assistant message; a stopped reply drops its unfinished tool calls (their JSON may be cut)."""
        result = self.result or ChatResult("".join(self.content), "".join(self.reasoning), (), "stop")
        return result.message()


class RemoteConversation:
    """A chat with a running server; the history lives here, since the HTTP API is stateless."""

    def __init__(self, client: Client, *, system: str | None = None, turn: TurnOptions | None = None) -> None:
        self._client = client
        self._turn = turn or TurnOptions()
        self._messages: list[dict[str, Any]] = []
        self.reset(system)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self._messages

    def reset(self, system: str | None) -> None:
        self._messages = [{"role": "system", "content": system}] if system else []

    def reply(self, text: str, *, images: Sequence[Path] = (), audio: Sequence[Path] = ()) -> Reply:
        user = _user_message(text, images, audio)
        partial = _Partial()
        turn = self._turn
        events = self._client.stream([*self._messages, user], tools=turn.tools, thinking=turn.thinking, **turn.sampling)
        try:
            for event in events:
                partial.feed(event)
                yield event
        except LfmError:
            raise  # refused or failed: the history stays as it was, so the next message can still go
        except (GeneratorExit, KeyboardInterrupt):
            self._messages += [user, partial.message()]
            raise
        finally:
            _close(events)
        self._messages += [user, partial.message()]

    def close(self) -> None:
        self._client.close()


class LocalConversation:
    """A chat with a model loaded in this process; :class:`lfmserve.Chat` keeps the history and the cache."""

    def __init__(self, model: Model, *, system: str | None = None, turn: TurnOptions | None = None) -> None:
        self._model = model
        self._turn = turn or TurnOptions()
        self._chat: Chat = model.chat(system=system, tools=self._turn.tools)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self._chat.messages

    def reset(self, system: str | None) -> None:
        self._chat = self._model.chat(system=system, tools=self._turn.tools)  # a new chat clears its slot's cache

    def reply(self, text: str, *, images: Sequence[Path] = (), audio: Sequence[Path] = ()) -> Reply:
        turn = self._turn
        events = self._chat.events(text, images=images, audio=audio, thinking=turn.thinking, **turn.sampling)
        try:
            yield from events
        finally:
            _close(events)

    def close(self) -> None:
        self._model.close()


def _user_message(text: str, images: Sequence[Path], audio: Sequence[Path]) -> dict[str, Any]:
    """The user message, its media as content parts: kept in the history, the model still sees them next turn."""
    if not images and not audio:
        return {"role": "user", "content": text}
    from ..client.media import audio_part, image_part

    parts = [{"type": "text", "text": text}, *map(image_part, images), *map(audio_part, audio)]
    return {"role": "user", "content": parts}


def _close(events: Iterator[StreamEvent]) -> None:
    """Close a stream that may still be running (the Iterator contract does not promise ``close``)."""
    close = getattr(events, "close", None)
    if close is not None:
        close()
