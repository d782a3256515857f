"""``POST /v1/chat/completions/control``: ending the thinking of a running chat completion, by its id.

A chat request with ``reasoning_control: true`` arms its generation with a :class:`ReasoningControl`; while its
answer is being written, the completion is live here under the id its answer carries (``chatcmpl-...``). The
control route finds it and asks for the end: the engine writes the end of the thinking at the generation's next
step, as a spent reasoning budget does, and the answer follows. As in llama-server, the route never fails for
a completion it cannot act on: an unknown or finished id, or one not armed, is ``{"success": false}`` with a
message.

Example::

    live = LiveCompletions()
    async for chunk in live.during(cid, control, chunks):  # the stream of the answer
        ...
    live.end_reasoning(cid)  # {"success": True} while it runs
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ..engine.records import ReasoningControl

T = TypeVar("T")


class LiveCompletions:
    """The chat completions being answered now, by id, each with its control (None: not armed)."""

    def __init__(self) -> None:
        self._live: dict[str, ReasoningControl | None] = {}

    @contextmanager
    def live(self, cid: str, control: ReasoningControl | None) -> Iterator[None]:
        """``cid`` is live while the block runs (a whole answer being generated)."""
        self._live[cid] = control
        try:
            yield
        finally:
            del self._live[cid]

    async def during(self, cid: str, control: ReasoningControl | None, items: AsyncIterator[T]) -> AsyncIterator[T]:
        """``items`` (a streamed answer's chunks), with ``cid`` live until they end or the client leaves."""
        with self.live(cid, control):
            async for item in items:
                yield item

    def end_reasoning(self, cid: str) -> dict[str, Any]:
        """llama-server's answer to ``reasoning_end`` for ``cid``."""
        if cid not in self._live:
            return {"success": False, "message": "no active completion for this id"}
        control = self._live[cid]
        if control is None:
            return {"success": False, "message": "reasoning control not enabled for this completion"}
        control.end()
        return {"success": True}
