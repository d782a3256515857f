"""The load the CLI starts before it builds the app: handed over once, then loaded again; a failure raised where
the result is taken, even when it comes after the taking began (that race hung a router's child)."""

from __future__ import annotations

import threading
from typing import Any

from lfmserve.errors import LfmError
from lfmserve.loading.ahead import LoadAhead


class _Serving:
    def __init__(self, n: int) -> None:
        self.n, self.closed = n, False

    def close(self) -> None:
        self.closed = True


def test_the_first_call_takes_the_load_begun_at_once_and_each_later_call_loads_again() -> None:
    loads: list[_Serving] = []

    def load() -> Any:
        loads.append(_Serving(len(loads) + 1))
        return loads[-1]

    ahead = LoadAhead(load)
    assert ahead().n == 1
    assert ahead().n == 2  # waking from sleep
    assert len(loads) == 2


def test_a_load_that_fails_after_the_result_was_asked_for_raises_there() -> None:
    asked, go_on = threading.Event(), threading.Event()

    def load() -> Any:
        go_on.wait()
        raise LfmError("failed to load model from broken.gguf")

    ahead = LoadAhead(load)
    errors: list[BaseException] = []

    def take() -> None:
        asked.set()
        try:
            ahead()
        except LfmError as exc:
            errors.append(exc)

    taker = threading.Thread(target=take)
    taker.start()
    asked.wait()
    go_on.set()
    taker.join(timeout=60)
    assert not taker.is_alive()
    assert [str(e) for e in errors] == ["failed to load model from broken.gguf"]


def test_a_start_that_fails_after_the_load_began_frees_what_it_loaded() -> None:
    loaded = _Serving(1)
    ahead = LoadAhead(lambda: loaded)  # type: ignore[arg-type,return-value]
    ahead.discard()
    assert loaded.closed
