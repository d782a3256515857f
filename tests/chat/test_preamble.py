"""A model's default system message and its messages before the conversation (Ollama's ``system`` and
``messages`` layers), put around a chat as Ollama's chat and generate handlers put them, and read from their
files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lfmserve.chat.preamble import Preamble, read_preamble
from lfmserve.chat.request import ChatRequest, Message
from lfmserve.errors import LfmError

PREAMBLE = Preamble(
    system="You are terse.",
    messages=(Message(role="user", content="Who are you?"), Message(role="assistant", content="A tiny model.")),
)


def _turns(request: ChatRequest) -> list[tuple[str, object]]:
    return [(message.role, message.content) for message in PREAMBLE.apply(request).messages]


def test_a_chat_without_a_system_message_gets_the_models_then_its_messages() -> None:
    chat = ChatRequest(messages=(Message(role="user", content="Hello"),))
    assert _turns(chat) == [
        ("system", "You are terse."),
        ("user", "Who are you?"),
        ("assistant", "A tiny model."),
        ("user", "Hello"),
    ]


def test_a_chat_that_opens_with_its_own_system_message_keeps_it_after_the_models_messages() -> None:
    """Ollama's ChatHandler: ``append(m.Messages, req.Messages...)``, its system only when the request's first
    message is not one."""
    chat = ChatRequest(messages=(Message(role="system", content="Be loud."), Message(role="user", content="Hello")))
    assert _turns(chat) == [
        ("user", "Who are you?"),
        ("assistant", "A tiny model."),
        ("system", "Be loud."),
        ("user", "Hello"),
    ]


def test_generate_puts_its_system_before_the_models_messages() -> None:
    """Ollama's GenerateHandler: the request's system (else the model's), the model's messages, the prompt."""
    own = (Message(role="system", content="Be loud."), Message(role="user", content="Hello"))
    assert _turns(ChatRequest(messages=own, model_messages_after_system=True)) == [
        ("system", "Be loud."),
        ("user", "Who are you?"),
        ("assistant", "A tiny model."),
        ("user", "Hello"),
    ]
    alone = ChatRequest(messages=own[1:], model_messages_after_system=True)
    assert _turns(alone) == [
        ("system", "You are terse."),
        ("user", "Who are you?"),
        ("assistant", "A tiny model."),
        ("user", "Hello"),
    ]


def test_no_preamble_or_no_messages_leaves_the_request_as_it_is() -> None:
    chat = ChatRequest(messages=(Message(role="user", content="Hello"),))
    assert Preamble().apply(chat) is chat
    empty = ChatRequest(messages=())
    assert PREAMBLE.apply(empty) is empty


def test_the_files_are_read_and_checked(tmp_path: Path) -> None:
    system, messages = tmp_path / "system", tmp_path / "messages"
    system.write_text("You are terse.")
    messages.write_text(json.dumps([{"role": "user", "content": "Who are you?"}, {"role": "assistant"}]))
    assert read_preamble(str(system), str(messages)) == Preamble(
        "You are terse.", (Message(role="user", content="Who are you?"), Message(role="assistant", content=""))
    )
    system.write_text("")
    assert read_preamble(str(system), None) == Preamble()  # an empty SYSTEM is none, as in Ollama
    messages.write_text(json.dumps([{"role": "narrator", "content": "x"}]))
    with pytest.raises(LfmError) as bad:
        read_preamble(None, str(messages))
    assert str(bad.value) == (
        f'--chat-messages-file {messages}: message 0 is not {{"role": system|user|assistant|tool, "content": text}}'
    )
    with pytest.raises(LfmError) as missing:
        read_preamble(str(tmp_path / "nope"), None)
    assert str(missing.value).startswith(f"--system-prompt-file {tmp_path / 'nope'} cannot be read: ")
