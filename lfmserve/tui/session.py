"""What the chat does with each line typed: a message streams a reply, a ``/command`` changes the chat.

No terminal input here (:mod:`lfmserve.tui.app` reads the lines), so the tests drive a session with a fake
:class:`~lfmserve.tui.conversation.Conversation` and a rich Console writing to a string. Errors from the
model or the server are one red line; the chat goes on.

Example::

    session = ChatSession(conversation, Console())
    session.handle("/system Answer in French.")
    session.handle("Hello!")
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.text import Text

from ..errors import LfmError
from .conversation import Conversation
from .view import REASONING_STYLE, ReplyView


@dataclass(frozen=True, slots=True)
class Command:
    usage: str
    help: str
    run: Callable[[ChatSession, str], bool]  # False ends the chat


class ChatSession:
    """One chat: the conversation, the media waiting for the next message, and the last reply's think."""

    def __init__(self, conversation: Conversation, console: Console, *, system: str | None = None) -> None:
        self.conversation = conversation
        self.console = console
        self.system = system
        self.images: list[Path] = []
        self.audio: list[Path] = []
        self.last_reasoning = ""

    def handle(self, line: str) -> bool:
        """Run one typed line; False when the chat should end."""
        line = line.strip()
        if not line:
            return True
        if not line.startswith("/"):
            self.send(line)
            return True
        name, _, argument = line[1:].partition(" ")
        command = COMMANDS.get(name)
        if command is None:
            self.error(f"unknown command /{name} (/help lists them)")
            return True
        return command.run(self, argument.strip())

    def send(self, text: str) -> None:
        """Stream the reply to ``text``; Ctrl-C stops it (closing the stream cancels the generation)."""
        images, audio, self.images, self.audio = self.images, self.audio, [], []
        view = ReplyView(self.console)
        events = self.conversation.reply(text, images=images, audio=audio)
        try:
            for event in events:
                view.show(event)
        except KeyboardInterrupt:
            view.stopped("stopped")
        except LfmError as exc:
            view.close()
            self.error(str(exc))
        finally:
            events.close()
            view.close()
            self.last_reasoning = view.reasoning

    def error(self, message: str) -> None:
        self.console.print(Text(f"error: {message}", style="red"), soft_wrap=True)  # one line, however long

    def note(self, message: str) -> None:
        self.console.print(Text(message, style="dim"))

    def reset(self, _: str) -> bool:
        self.conversation.reset(self.system)
        self.images, self.audio, self.last_reasoning = [], [], ""
        self.note("conversation forgotten")
        return True

    def set_system(self, text: str) -> bool:
        if not text:
            self.note(f"system prompt: {self.system}" if self.system else "no system prompt")
            return True
        self.system = text
        self.conversation.reset(text)
        self.note("system prompt set; the conversation starts over")
        return True

    def attach_image(self, path: str) -> bool:
        return self._attach(path, self.images, "image")

    def attach_audio(self, path: str) -> bool:
        return self._attach(path, self.audio, "audio")

    def _attach(self, path: str, media: list[Path], kind: str) -> bool:
        file = Path(path).expanduser()
        if not path or not file.is_file():
            self.error(f"/{kind} needs a file: {path!r} is not one")
        else:
            media.append(file)
            self.note(f"{kind} {file.name} goes with your next message")
        return True

    def save(self, path: str) -> bool:
        if not path:
            self.error("/save needs a file name")
            return True
        try:
            text = json.dumps(self.conversation.messages, ensure_ascii=False, indent=2)
            Path(path).expanduser().write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            self.error(f"could not save to {path}: {exc}")
        else:
            self.note(f"saved {len(self.conversation.messages)} messages to {path}")
        return True

    def think(self, _: str) -> bool:
        if self.last_reasoning:
            self.console.print(Text(self.last_reasoning, style=REASONING_STYLE))
        else:
            self.note("the last reply had no thinking")
        return True

    def help(self, _: str) -> bool:
        for command in COMMANDS.values():
            self.console.print(Text(f"{command.usage:<14} {command.help}"))
        self.console.print(Text(f"{'Ctrl-C':<14} stop the reply; Ctrl-D (or /quit) leaves"))
        return True

    def quit(self, _: str) -> bool:
        return False


COMMANDS: dict[str, Command] = {
    "reset": Command("/reset", "forget the conversation", ChatSession.reset),
    "system": Command("/system TEXT", "set the system prompt (starts over); alone, show it", ChatSession.set_system),
    "image": Command("/image PATH", "attach a picture to the next message", ChatSession.attach_image),
    "audio": Command("/audio PATH", "attach a recording to the next message", ChatSession.attach_audio),
    "think": Command("/think", "show the last reply's thinking", ChatSession.think),
    "save": Command("/save FILE", "write the conversation as JSON (OpenAI messages)", ChatSession.save),
    "help": Command("/help", "this list", ChatSession.help),
    "quit": Command("/quit", "leave the chat", ChatSession.quit),
}
