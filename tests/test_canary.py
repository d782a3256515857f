"""The canary of ``tests/canary.py``: its count stays exact however often the kernel gives the canary's own
connection a port an earlier one had (here that happens within about 3000 connections)."""

from __future__ import annotations

import socket
from collections import Counter

from tests.canary import Canary


def test_settle_counts_the_others_exactly_over_thousands_of_its_own_connections() -> None:
    with Canary() as canary:
        for _ in range(2):
            socket.create_connection(("127.0.0.1", canary.port)).close()
        counts = Counter(canary.settle() for _ in range(5000))
    assert counts == {2: 5000}
