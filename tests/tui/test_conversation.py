"""The two Conversations: the remote one keeps the OpenAI history itself, the local one wraps lfmserve.Chat."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from lfmserve.errors import ContextLengthExceeded
from lfmserve.local import Model
from lfmserve.results import ContentDelta, FinalMessage, ReasoningDelta, StreamEvent
from lfmserve.testing.media import image_bytes
from lfmserve.tui.conversation import LocalConversation, RemoteConversation, TurnOptions
from tests.tui.fakes import final


class FakeClient:
    """``Client.stream`` as the contract has it: the given events, or the error; records what was sent."""

    def __init__(self, events: Sequence[StreamEvent], error: Exception | None = None) -> None:
        self.events, self.error = events, error
        self.requests: list[dict[str, Any]] = []
        self.closed_streams = 0

    def stream(self, messages: list[dict[str, Any]], **options: Any) -> Iterator[StreamEvent]:
        self.requests.append({"messages": messages, **options})
        try:
            if self.error is not None:
                raise self.error
            yield from self.events
        finally:
            self.closed_streams += 1

    def close(self) -> None:
        pass


def remote(client: FakeClient, **turn: Any) -> RemoteConversation:
    return RemoteConversation(client, system="Be brief.", turn=TurnOptions(**turn))  # type: ignore[arg-type]


def test_a_finished_reply_joins_the_history() -> None:
    client = FakeClient([ReasoningDelta("hm"), ContentDelta("Hello there."), final(reasoning="hm")])
    conversation = remote(client, thinking=False, sampling={"max_tokens": 8})
    assert [type(e) for e in conversation.reply("Hi")][-1] is FinalMessage
    assert client.requests == [
        {
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            "tools": None,
            "thinking": False,
            "max_tokens": 8,
        }
    ]
    assert conversation.messages[1:] == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello there.", "reasoning_content": "hm"},
    ]


def test_a_stopped_reply_is_kept_as_far_as_it_went() -> None:
    client = FakeClient([ContentDelta("Once"), ContentDelta(" upon"), final()])
    conversation = remote(client)
    reply = conversation.reply("Story?")
    assert next(reply) == ContentDelta("Once")
    reply.close()
    assert client.closed_streams == 1  # the HTTP stream is closed, so the server cancels
    assert conversation.messages[1:] == [
        {"role": "user", "content": "Story?"},
        {"role": "assistant", "content": "Once"},
    ]


def test_a_refused_message_leaves_the_history_alone() -> None:
    conversation = remote(FakeClient([], error=ContextLengthExceeded(9000, 4096)))
    with pytest.raises(ContextLengthExceeded):
        list(conversation.reply("a long text"))
    assert conversation.messages == [{"role": "system", "content": "Be brief."}]
    conversation.reset(None)
    assert conversation.messages == []


def test_media_stay_in_the_history_as_content_parts(tmp_path: Path) -> None:
    picture = tmp_path / "red.png"
    picture.write_bytes(image_bytes(8, 8, seed=1, format="PNG"))
    client = FakeClient([final()])
    conversation = remote(client)
    list(conversation.reply("What is this?", images=[picture]))
    text, image = conversation.messages[1]["content"]
    assert text == {"type": "text", "text": "What is this?"}
    assert image["type"] == "image_url" and image["image_url"]["url"].startswith("data:image/png;base64,")


def test_local_conversation(tiny_gguf: Path) -> None:
    with Model(tiny_gguf, n_ctx=1024, n_threads=1) as model:
        conversation = LocalConversation(model, system="Be brief.", turn=TurnOptions(sampling={"max_tokens": 4}))
        events = list(conversation.reply("Hi"))
        assert isinstance(events[-1], FinalMessage)
        assert [m["role"] for m in conversation.messages] == ["system", "user", "assistant"]
        reply = conversation.reply("Again")
        next(reply)
        reply.close()  # stopped: the engine cancels, the chat keeps the partial reply
        assert [m["role"] for m in conversation.messages][-2:] == ["user", "assistant"]
        conversation.reset("Be verbose.")
        assert conversation.messages == [{"role": "system", "content": "Be verbose."}]
