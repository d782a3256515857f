"""ChatSession: messages stream replies, /commands change the chat, errors and Ctrl-C keep it alive."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from lfmserve.errors import ContextLengthExceeded
from lfmserve.results import ContentDelta, ReasoningDelta
from lfmserve.tui.conversation import Reply
from lfmserve.tui.session import ChatSession
from tests.tui.fakes import FakeConversation, final, string_console


def session(conversation: FakeConversation | None = None) -> tuple[ChatSession, FakeConversation, Iterator[str]]:
    fake = conversation or FakeConversation()
    console, out = string_console()

    def lines() -> Iterator[str]:
        seen = 0
        while True:
            text = out.getvalue()
            yield text[seen:]
            seen = len(text)

    return ChatSession(fake, console, system="Be brief."), fake, lines()


def test_a_message_streams_its_reply() -> None:
    chat, fake, output = session()
    assert chat.handle("  Hi!  ")
    assert fake.sent == [("Hi!", [], [])]
    assert next(output) == "Hello there.\n3 tokens, 100.0 tok/s, 4 cached\n"
    assert chat.handle("") and len(fake.sent) == 1  # a blank line sends nothing


def test_media_go_with_the_next_message_only(tmp_path: Path) -> None:
    chat, fake, output = session()
    picture, clip = tmp_path / "cat.png", tmp_path / "meow.wav"
    picture.write_bytes(b"png")
    clip.write_bytes(b"wav")
    chat.handle(f"/image {picture}")
    chat.handle(f"/audio {clip}")
    chat.handle(f"/image {tmp_path / 'missing.png'}")
    assert "error: /image needs a file" in next(output)
    chat.handle("What is this?")
    chat.handle("And now?")
    assert fake.sent == [("What is this?", [picture], [clip]), ("And now?", [], [])]


def test_ctrl_c_stops_the_reply_and_the_chat_goes_on() -> None:
    class Interrupting(FakeConversation):
        def reply(self, text: str, *, images: Sequence[Path] = (), audio: Sequence[Path] = ()) -> Reply:
            stream = super().reply(text)
            yield next(stream)
            stream.close()
            raise KeyboardInterrupt  # as SIGINT does, in the middle of the stream

    chat, fake, output = session(Interrupting([ContentDelta("Once upon"), ContentDelta(" a time"), final()]))
    assert chat.handle("Tell me a story")
    assert next(output) == "Once upon\nstopped\n"
    assert fake.closed_early


def test_ctrl_c_in_the_consumer_closes_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    chat, fake, output = session(FakeConversation([ContentDelta("a"), ContentDelta("b"), final()]))
    shown: list[object] = []

    def show(self: object, event: object) -> None:
        shown.append(event)
        raise KeyboardInterrupt

    monkeypatch.setattr("lfmserve.tui.view.ReplyView.show", show)
    assert chat.handle("go")
    assert fake.closed_early and len(shown) == 1
    assert next(output) == "stopped\n"


def test_an_error_is_one_red_line() -> None:
    fake = FakeConversation([ContentDelta("Par")])
    fake.error = ContextLengthExceeded(5000, 4096)
    chat, _, output = session(fake)
    assert chat.handle("long text")
    assert next(output) == f"Par\nerror: {fake.error}\n"


def test_think_shows_the_last_reasoning() -> None:
    chat, _, output = session(FakeConversation([ReasoningDelta("two words"), ContentDelta("Hi"), final("Hi")]))
    chat.handle("/think")
    assert next(output) == "the last reply had no thinking\n"
    chat.handle("hello")
    assert next(output).startswith("thinking (2 words), /think to show\nHi\n")
    chat.handle("/think")
    assert next(output) == "two words\n"


def test_reset_system_and_save(tmp_path: Path) -> None:
    chat, fake, output = session()
    chat.handle("Hi")
    saved = tmp_path / "chat.json"
    chat.handle(f"/save {saved}")
    assert json.loads(saved.read_text()) == fake.messages and len(fake.messages) == 2
    chat.handle("/reset")
    assert fake.system == "Be brief." and fake.messages == [{"role": "system", "content": "Be brief."}]
    chat.handle("/system Answer in French.")
    assert fake.system == "Answer in French."
    next(output)
    chat.handle("/system")
    assert next(output) == "system prompt: Answer in French.\n"
    chat.handle(f"/save {tmp_path / 'no' / 'such' / 'dir.json'}")
    assert next(output).startswith("error: could not save")


def test_help_unknown_and_quit() -> None:
    chat, _, output = session()
    assert chat.handle("/help")
    listing = next(output)
    assert "/reset" in listing and "/image PATH" in listing and "/quit" in listing
    assert chat.handle("/nope")
    assert next(output) == "error: unknown command /nope (/help lists them)\n"
    assert not chat.handle("/quit")
