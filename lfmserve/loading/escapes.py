"""llama-server's ``--escape`` (on by default): ``\\n``, ``\\r``, ``\\t``, ``\\'``, ``\\"``, ``\\\\`` and ``\\xHH`` in
the strings typed on its command line become the characters they name (``string_process_escapes``).

llama-server applies it to its stop strings (``-r``) and DRY's sequence breakers, so ``-r "\\n"`` stops at a new
line and ``--dry-sequence-breaker "\\n"`` breaks at one; a backslash before anything else stays as typed.
"""

from __future__ import annotations

import re

_ESCAPE = re.compile(r"\\(?:x([0-9a-fA-F]{2})|(.))", re.DOTALL)
_CHARACTERS = {"n": "\n", "r": "\r", "t": "\t", "'": "'", '"': '"', "\\": "\\"}


def process_escapes(text: str) -> str:
    """``text`` with its escapes replaced, as llama.cpp's ``string_process_escapes`` does."""

    def replace(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return chr(int(match.group(1), 16))
        return _CHARACTERS.get(match.group(2), match.group(0))

    return _ESCAPE.sub(replace, text)
