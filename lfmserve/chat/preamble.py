"""What a model puts around every chat: a default system message and messages before the conversation.

These are Ollama's ``SYSTEM`` and ``MESSAGE`` lines (its ``system`` and ``messages`` layers), given to a model
with ``--system-prompt-file`` and ``--chat-messages-file``, and applied as Ollama's handlers apply them, to every
chat whatever API family it came in (OpenAI's, Anthropic's, the Responses API, Ollama's ``/api/chat`` and
``/api/generate``): the model's messages go before the request's own, and its system message first unless the
request's first message is a system message. Ollama's ``/api/generate`` puts its ``system`` before the model's
messages (:attr:`~.request.ChatRequest.model_messages_after_system`). A raw completion has no chat, so neither.

Example::

    preamble = Preamble(system="Answer in French.", messages=(Message(role="user", content="Hi"),))
    preamble.apply(ChatRequest(messages=(Message(role="user", content="Hello"),))).messages
    # system "Answer in French.", user "Hi", user "Hello"
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast, get_args

from ..errors import LfmError
from .request import ChatRequest, Message, Role


@dataclass(frozen=True, slots=True)
class Preamble:
    """A model's default system message (None: none) and the messages put before every conversation."""

    system: str | None = None
    messages: tuple[Message, ...] = ()

    def apply(self, request: ChatRequest) -> ChatRequest:
        """The chat as the template sees it: Ollama's ``ChatHandler`` (and ``GenerateHandler``) order. A chat without
        messages (Anthropic's route takes one) is left as it is: Ollama generates nothing for one."""
        own = request.messages
        if (self.system is None and not self.messages) or not own:
            return request
        leads = own[0].role == "system"
        if leads and request.model_messages_after_system:
            return replace(request, messages=(own[0], *self.messages, *own[1:]))
        messages = (*self.messages, *own)
        if self.system is not None and not leads:
            messages = (Message(role="system", content=self.system), *messages)
        return replace(request, messages=messages)


def read_preamble(system_file: str | None, messages_file: str | None) -> Preamble:
    """The preamble ``--system-prompt-file`` and ``--chat-messages-file`` give (an empty system file gives none, as
    an empty ``SYSTEM`` does in Ollama); LfmError naming the file and what is wrong with it."""
    system = _read(system_file, "--system-prompt-file") if system_file else None
    messages: tuple[Message, ...] = ()
    if messages_file:
        try:
            messages = parse_messages(json.loads(_read(messages_file, "--chat-messages-file")))
        except ValueError as exc:
            raise LfmError(f"--chat-messages-file {messages_file}: {exc}") from None
    return Preamble(system or None, messages)


def parse_messages(value: Any) -> tuple[Message, ...]:
    """Ollama's messages layer (``[{"role": "user", "content": "..."}, ...]``) as chat messages; ValueError for
    anything else."""
    if not isinstance(value, list):
        raise ValueError("not a JSON list of messages")
    out = []
    for index, item in enumerate(value):
        role = item.get("role") if isinstance(item, dict) else None
        content = item.get("content", "") if isinstance(item, dict) else None
        if role not in get_args(Role) or not isinstance(content, str):
            raise ValueError(f'message {index} is not {{"role": system|user|assistant|tool, "content": text}}')
        out.append(Message(role=cast(Role, role), content=content))
    return tuple(out)


def _read(path: str, flag: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LfmError(f"{flag} {path} cannot be read: {exc}") from None
