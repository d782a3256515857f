"""Incremental, UTF-8-safe text from token ids.

A token's piece may end in the middle of a multi-byte character (byte-level BPE splits emoji and
CJK characters across tokens). The detokenizer keeps those bytes until the character is complete,
so every string it returns is valid and the concatenation of all of them is the full text.

Example::

    detok = StreamingDetokenizer(model.token_to_piece)
    for token in tokens:
        sys.stdout.write(detok.add(token))
    sys.stdout.write(detok.flush())
"""

from __future__ import annotations

import codecs
from collections.abc import Callable


class StreamingDetokenizer:
    def __init__(self, token_to_piece: Callable[[int], bytes]) -> None:
        self._token_to_piece = token_to_piece
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token: int) -> str:
        """The text this token completes (possibly empty while a character is split)."""
        return self._decoder.decode(self._token_to_piece(token))

    def flush(self) -> str:
        """Whatever bytes remain, with an incomplete character shown as U+FFFD."""
        return self._decoder.decode(b"", final=True)
