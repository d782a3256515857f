"""Finding each whole call in a call list while the model is still writing it.

LFM models write their calls as one list, ``[a(x=1), b(y="]")]`` (or JSON objects, ``[{"name": ...}]``), and
may write call after call until the token limit cuts the list. Each item is complete when its brackets close
(strings, with their escapes, are skipped over, also when a piece ends inside one), so a stream can hand a
call on as soon as its ``)`` arrives, and a cut list still yields the calls written before the cut.

Example::

    scanner = CallListScanner()
    scanner.feed('[a(x=1), b(y="]")')   # -> ['a(x=1)', 'b(y="]")']
    scanner.feed(', c(z=')              # -> []: c is not complete
"""

from __future__ import annotations

_OPENERS = "([{"
_CLOSERS = ")]}"


class CallListScanner:
    """The whole items of a growing call list, in order; text outside items (brackets, commas, spaces) is not
    returned, and anything else found there makes :attr:`stray` true."""

    def __init__(self) -> None:
        self._text = ""
        self._at = 0
        self._depth = 0
        #: The depth items sit at: 1 inside ``[...]``, 0 for a bare call; None until the first character says.
        self._base: int | None = None
        self._quote = ""
        self._escaped = False
        self._item_start = -1
        #: The list's closing ``]`` was seen; ``end`` is where the text after it starts.
        self.closed = False
        self.end = 0
        #: Text that is no item and no list punctuation was seen (the block is not a plain call list).
        self.stray = False

    def feed(self, text: str) -> list[str]:
        self._text += text
        items: list[str] = []
        while self._at < len(self._text):
            item = self._step(self._text[self._at])
            self._at += 1
            if item is not None:
                items.append(item)
        return items

    def _step(self, char: str) -> str | None:
        """Take one character; the item it completes, if any."""
        if self._quote:
            if self._escaped:
                self._escaped = False
            elif char == "\\":
                self._escaped = True
            elif char == self._quote:
                self._quote = ""
            return None
        if self._base is None and not char.isspace():
            self._base = 1 if char == "[" else 0
            if char == "[":
                self._depth = 1
                return None
        if self._item_start < 0:
            self._between_items(char)
            return None
        if char in "\"'":
            self._quote = char
        elif char in _OPENERS:
            self._depth += 1
        elif char in _CLOSERS:
            self._depth -= 1
            if self._depth < (self._base or 0):  # the list closed inside an item: not a call list
                self.stray = True
            elif self._depth == self._base:
                item = self._text[self._item_start : self._at + 1]
                self._item_start = -1
                return item
        return None

    def _between_items(self, char: str) -> None:
        """A character outside any item: list punctuation, or the first character of the next item."""
        if char.isspace() or (char == "," and self._base == 1):
            return
        if self.closed or self._base is None:
            self.stray = True
            return
        if char == "]" and self._base == 1:
            self.closed, self.end = True, self._at + 1
            self._depth = 0
            return
        if char in _CLOSERS or char in "\"'":
            self.stray = True
            return
        self._item_start = self._at
        if char in _OPENERS:
            self._depth += 1
