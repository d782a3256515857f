"""A child's start, seen from the router, over a fake spawner (:mod:`tests.router.fake_children`)."""

from __future__ import annotations

import asyncio
import os

import pytest

from lfmserve.router.child import Child
from lfmserve.settings import Settings
from tests.router.fake_children import FakeSpawner


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_child_that_cannot_be_started_leaves_no_socket_open() -> None:
    spawner = FakeSpawner()
    spawner.refuse = OSError("fork failed")

    async def scenario() -> tuple[int, int]:
        before = _open_fds()
        with pytest.raises(OSError, match="fork failed"):
            await Child.start(spawner, "text", Settings())
        return before, _open_fds()

    before, after = asyncio.run(scenario())
    assert after == before
    assert spawner.refused == ["text"]
