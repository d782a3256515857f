"""The engine thread's inbox, without an engine: order, waiting for a result, and refusal once closed."""

from __future__ import annotations

import threading

import pytest

from lfmserve.engine.inbox import Inbox
from lfmserve.errors import InvalidRequest, Unavailable
from tests.conftest import STATE_TIMEOUT_S


def _engine_thread(inbox: Inbox, stop: threading.Event) -> threading.Thread:
    """A thread that runs the inbox's commands as the engine thread does, until ``stop`` is set."""

    def loop() -> None:
        while not stop.is_set():
            inbox.run(block=True)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def test_commands_run_in_the_order_they_were_queued() -> None:
    inbox, ran = Inbox(), []
    inbox.send(lambda: ran.append(1))
    inbox.post(lambda: ran.append(2))
    inbox.send(lambda: ran.append(3))
    assert ran == []  # nothing runs until the engine thread drains the inbox
    inbox.run(block=False)
    assert ran == [1, 2, 3]
    inbox.run(block=False)  # an empty inbox returns at once
    assert ran == [1, 2, 3]


def test_call_returns_the_result_or_raises_the_error_on_the_callers_thread() -> None:
    inbox, stop = Inbox(), threading.Event()
    thread = _engine_thread(inbox, stop)
    ran_on: list[str] = []

    def answer() -> int:
        ran_on.append(threading.current_thread().name)
        return 42

    def refuse() -> int:
        raise InvalidRequest("slot 9 does not exist (there are 4)", param="id_slot")

    assert inbox.call(answer) == 42
    assert ran_on == [thread.name]
    with pytest.raises(InvalidRequest, match=r"slot 9 does not exist \(there are 4\)"):
        inbox.call(refuse)
    inbox.close(stop.set)
    thread.join(5)
    assert not thread.is_alive()


def test_closing_queues_the_last_command_and_refuses_everything_after_it() -> None:
    inbox, ran = Inbox(), []
    inbox.send(lambda: ran.append("before"))
    assert inbox.close(lambda: ran.append("stop")) is True
    assert inbox.close(lambda: ran.append("stop again")) is False  # closing twice queues nothing
    with pytest.raises(Unavailable, match="the server is shutting down"):
        inbox.send(lambda: ran.append("after"))
    with pytest.raises(Unavailable, match="the server is shutting down"):
        inbox.call(lambda: 1)  # refused, not left waiting for a thread that has stopped
    inbox.post(lambda: ran.append("cancel"))  # a no-op once closed
    inbox.run(block=False)
    assert ran == ["before", "stop"]


def test_wake_ends_a_blocking_run_without_work_even_once_closed() -> None:
    inbox = Inbox()
    inbox.close(lambda: None)
    inbox.run(block=False)
    inbox.wake()  # the media encoder's worker may finish after the close
    returned = threading.Event()

    def wait() -> None:
        inbox.run(block=True)
        returned.set()

    threading.Thread(target=wait, daemon=True).start()
    assert returned.wait(STATE_TIMEOUT_S)
