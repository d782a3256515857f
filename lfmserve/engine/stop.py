"""Stop strings over streamed text: never emit a partial stop string, never emit the stop itself.

Text is held back while its tail could still grow into a stop string; once a stop string appears
in full, the text before it is released and generation ends (llama-server's behaviour).

Example::

    matcher = StopMatcher(["\\n\\n"])
    matcher.feed("Hello\\n")   # -> ("Hello", None): "\\n" is held back
    matcher.feed("\\nWorld")   # -> ("", "\\n\\n"): stopped, nothing more to emit
"""

from __future__ import annotations

from collections.abc import Sequence


class StopMatcher:
    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._pending = ""

    def feed(self, text: str) -> tuple[str, str | None]:
        """Add text; return (text safe to emit now, the stop string that ended generation or None)."""
        if not self._stops:
            return text, None
        pending = self._pending + text
        first: tuple[int, str] | None = None
        for stop in self._stops:
            at = pending.find(stop)
            if at >= 0 and (first is None or at < first[0]):
                first = (at, stop)
        if first is not None:
            self._pending = ""
            return pending[: first[0]], first[1]
        hold = self._partial_suffix(pending)
        self._pending = pending[len(pending) - hold :] if hold else ""
        return pending[: len(pending) - hold], None

    def flush(self) -> str:
        """Release held-back text when generation ends for another reason."""
        out, self._pending = self._pending, ""
        return out

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest tail of ``text`` that is a proper prefix of some stop string."""
        best = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best
