"""What the handlers share, handed to them through the lifespan state (``request.state.app_state``)."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from prometheus_client import CollectorRegistry

from ..chat.serving import Serving
from ..settings import Settings


@dataclass(slots=True)
class AppState:
    """``serving`` is None until the model has loaded (the gate answers 503 until then)."""

    settings: Settings
    api_keys: tuple[bytes, ...]
    serving: Serving | None = None
    load_error: BaseException | None = None
    metrics: CollectorRegistry | None = None


def app_state(request: Request) -> AppState:
    state: AppState = request.state.app_state
    return state


def serving(request: Request) -> Serving:
    loaded = app_state(request).serving
    assert loaded is not None  # the gate answers 503 until it is set
    return loaded
