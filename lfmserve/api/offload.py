"""Reading a request's body, and where its preparation runs: a huge prompt must not hold up the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from fastapi import Request

from .body import BodyT, parse_body

P = ParamSpec("P")
T = TypeVar("T")
#: A body larger than this is parsed and its prompt prepared (rendered, tokenized) in a worker thread, so a huge
#: prompt does not hold up the event loop (tokenizing 20 MB took 6.8 s, during which /health did not answer).
OFF_LOOP_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class Offload:
    """Where a request's heavy preparation runs: inline for a small body, in a worker thread for a large one."""

    large: bool

    def also_if(self, heavy: bool) -> Offload:
        """Off the loop for a large body, and also when ``heavy`` (a prompt with media: mtmd resizes images)."""
        return Offload(self.large or heavy)

    async def __call__(self, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self.large:
            return await asyncio.to_thread(work, *args, **kwargs)
        return work(*args, **kwargs)


async def read_body(request: Request, model: type[BodyT]) -> tuple[BodyT, Offload]:
    """The request's body validated as ``model``, and where the rest of its preparation should run."""
    raw = await request.body()
    offload = Offload(len(raw) > OFF_LOOP_BYTES)
    return await offload(parse_body, model, raw), offload
