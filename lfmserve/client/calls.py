"""The client's sans-I/O core: an operation is a generator that yields :class:`Call` and receives :class:`Reply`.

Each method of the client (capabilities from three routes, transcription with its fallback, the image-token
probe) is written once as such a generator in :mod:`.operations`; :class:`~lfmserve.client.Client` drives it
with blocking httpx and :class:`~lfmserve.client.AsyncClient` with asyncio, so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call:
    """One HTTP request.

    ``handles`` lists the error statuses the operation reads itself instead of raising; ``retry`` False turns
    off the client's retries of refused connections and 503s (for a caller with its own polling loop).
    """

    method: str
    path: str
    json: Any = None
    params: Mapping[str, str] | None = None
    files: Mapping[str, tuple[str, bytes, str]] | None = None
    data: Mapping[str, str] | None = None
    handles: frozenset[int] = field(default_factory=frozenset)
    retry: bool = True


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer: its status and its body, parsed from JSON (the text when it is not JSON).

    Operations only see answers that succeeded or whose status their call ``handles``: the client raises
    every other error itself.
    """

    status: int
    body: Any

    @property
    def ok(self) -> bool:
        return self.status < 400


#: An operation: yields calls, receives their replies, returns its result.
Operation = Generator[Call, Reply, T]
