"""The terminal loop: prompt_toolkit reads lines (arrow keys walk the history), the session answers them.

Ctrl-C at the prompt clears the line and stays; Ctrl-D on an empty line leaves, as ``/quit`` does. While a
reply streams the terminal is back in cooked mode, so Ctrl-C is a SIGINT: Python raises KeyboardInterrupt
inside the stream loop, and :meth:`ChatSession.send` stops the reply there.
"""

from __future__ import annotations

from prompt_toolkit import PromptSession
from prompt_toolkit.history import InMemoryHistory

from .session import ChatSession

PROMPT = "> "


def run(session: ChatSession, title: str) -> None:
    """Read and answer lines until ``/quit`` or Ctrl-D."""
    session.note(f"{title}. /help lists the commands; Ctrl-D leaves.")
    prompt: PromptSession[str] = PromptSession(history=InMemoryHistory())
    while True:
        try:
            line = prompt.prompt(PROMPT)
        except KeyboardInterrupt:
            continue
        except EOFError:
            return
        if not session.handle(line):
            return
