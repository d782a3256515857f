"""``GET /models/sse``: the router's model events, as llama-server sends them, to every listener.

Each event is ``{"model": NAME, "event": KIND, "data": {...}}``: ``model_status`` when a child is started,
``status_change`` for each status a model takes (with ``exit_code`` when it is unloaded and ``info``, the model's
``/v1/models`` entry, when it is loaded), and ``models_reload`` (model ``*``) after ``GET /models?reload=1``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

#: Events a listener that does not read may fall behind by before its stream is ended (it may connect again).
_BACKLOG = 1024


class Events:
    def __init__(self) -> None:
        self._listeners: set[asyncio.Queue[dict[str, Any] | None]] = set()

    def publish(self, model: str, event: str, data: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"model": model, "event": event}
        if data is not None:
            message["data"] = data
        for queue in list(self._listeners):
            try:
                queue.put_nowait(message)
            except asyncio.QueueFull:  # a listener this far behind has stopped reading: its stream ends
                self._end(queue)

    def close(self) -> None:
        """End every listener's stream (the server is shutting down: an open stream would hold it up)."""
        for queue in list(self._listeners):
            self._end(queue)

    def _end(self, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        """End one listener's stream: what it has not read is dropped, and the end is all that is left to read."""
        self._listeners.discard(queue)
        while not queue.empty():
            queue.get_nowait()
        queue.put_nowait(None)

    async def listen(self) -> AsyncIterator[dict[str, Any]]:
        """The events published from now on, until the caller stops iterating or :meth:`close`."""
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(_BACKLOG)
        self._listeners.add(queue)
        try:
            while (event := await queue.get()) is not None:
                yield event
        finally:
            self._listeners.discard(queue)
