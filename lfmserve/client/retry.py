"""When to send a request again: a server still loading (503) or not listening yet (connection refused).

Both happen at start-up, when a client is often launched beside the server; waiting a little and asking
again is what every integration ends up writing. Anything else (a 4xx, a 500, a read timeout in the middle
of a generation) is raised at once: sending it again could run a long generation twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import httpx

from ..errors import LfmError, TransportError
from .calls import Call
from .server_errors import error_from_body

#: The first wait, and the longest.
FIRST_DELAY_S = 0.25
MAX_DELAY_S = 4.0


class RetryableFailure(Exception):
    """An attempt that may be made again; ``error`` is what is raised when the retries are used up."""

    def __init__(self, error: LfmError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(slots=True)
class Backoff:
    """Waits of 0.25, 0.5, 1, 2, 4, 4... seconds, at most ``retries`` of them and none ending past ``deadline``."""

    retries: int
    deadline: float
    attempts: int = field(default=0)

    @classmethod
    def starting_now(cls, retries: int, timeout_s: float) -> Backoff:
        return cls(retries, time.monotonic() + timeout_s)

    def next_delay(self) -> float | None:
        """Seconds to wait before the next attempt, or None when it is time to give up."""
        delay: float = min(FIRST_DELAY_S * 2.0**self.attempts, MAX_DELAY_S)
        self.attempts += 1
        if self.attempts > self.retries or time.monotonic() + delay > self.deadline:
            return None
        return delay


def judged(call: Call, response: httpx.Response) -> httpx.Response:
    """The response when it succeeded or its status is one the call handles; else the error, raised.

    A 503 raises :class:`RetryableFailure` (when the call allows retries). The body of a failed answer must
    have been read already (streamed responses are read by the caller first).
    """
    status = response.status_code
    if status < 400 or status in call.handles:
        return response
    error = error_from_body(status, body_of(response))
    if status == 503 and call.retry:
        raise RetryableFailure(error)
    raise error


def transport_failure(exc: httpx.TransportError, url: str, call: Call) -> RetryableFailure:
    """A connection refused (retryable), or raises :class:`TransportError` for every other transport failure."""
    if isinstance(exc, httpx.ConnectError) and call.retry:
        error = TransportError(f"cannot connect to {url}: {exc}")
        error.__cause__ = exc
        return RetryableFailure(error)
    kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "failed"
    raise TransportError(f"{call.method} {url}{call.path} {kind}: {exc or type(exc).__name__}") from exc


def body_of(response: httpx.Response) -> object:
    """The JSON body, or its text when it is not JSON."""
    try:
        return response.json()
    except ValueError:
        return response.text
