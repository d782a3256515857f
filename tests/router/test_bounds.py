"""The router's conversation owners stay bounded however many conversation ids its clients name: a count and an
age, the oldest let go first, each let-go counted in the router's /metrics."""

from __future__ import annotations

from pathlib import Path

import httpx

from lfmserve.api.monitoring import prometheus_text
from lfmserve.router.catalog import ModelSpec
from lfmserve.router.conversations import ConversationOwners
from lfmserve.router.instance import Instance
from lfmserve.settings import Settings
from tests.conftest import Running
from tests.router.conftest import start_router


class Clock:
    def __init__(self) -> None:
        self.now = 5_000.0

    def __call__(self) -> float:
        return self.now


def _instance(name: str) -> Instance:
    return Instance(ModelSpec(name, (), (), "models_dir", Settings.of(model=f"{name}.gguf")))


def _metrics(n_kept: int, n_expired: int, n_dropped: int) -> str:
    return (
        "# HELP lfmserve:conversations Conversations whose stream owner is remembered.\n"
        "# TYPE lfmserve:conversations gauge\n"
        f"lfmserve:conversations {n_kept}\n"
        "# HELP lfmserve:conversations_expired_total Conversations forgotten for their age.\n"
        "# TYPE lfmserve:conversations_expired_total counter\n"
        f"lfmserve:conversations_expired_total {n_expired}\n"
        "# HELP lfmserve:conversations_dropped_total Conversations forgotten early, for their count.\n"
        "# TYPE lfmserve:conversations_dropped_total counter\n"
        f"lfmserve:conversations_dropped_total {n_dropped}\n"
    )


def test_10000_conversation_ids_stay_bounded_and_the_oldest_go() -> None:
    owners = ConversationOwners(clock=Clock())
    model = _instance("m")
    tickets = [owners.remember(f"conv-{i}", model) for i in range(10_000)]
    assert owners.max_conversations == len(owners) == 4096
    assert [i for i in range(10_000) if owners.owner(f"conv-{i}") is model] == list(range(5904, 10_000))
    assert prometheus_text(owners.metrics()) == _metrics(4096, 0, 5904)
    # Let go for room, not stopped: a request still waiting for its model is not cancelled by other clients' ids.
    assert not any(ticket.stopped.is_set() for ticket in tickets)


def test_a_conversation_named_again_is_young_again() -> None:
    owners = ConversationOwners(max_conversations=3, clock=Clock())
    first, second = _instance("first"), _instance("second")
    for conversation_id in ("a", "b", "c"):
        owners.remember(conversation_id, first)
    old_ticket = owners.remember("a", first)
    renewed = owners.remember("a", second)  # a newer request of "a" takes it over, and moves it to the end
    assert old_ticket.stopped.is_set() and not renewed.stopped.is_set()
    owners.remember("d", first)
    assert [owners.owner(key) for key in ("a", "b", "c", "d")] == [second, None, first, first]
    assert (owners.n_dropped, owners.n_expired) == (1, 0)


def test_a_conversation_is_forgotten_an_hour_after_it_was_last_named() -> None:
    clock = Clock()
    owners = ConversationOwners(clock=clock)
    model = _instance("m")
    owners.remember("old", model)
    clock.now += 1800
    owners.remember("recent", model)
    clock.now += 1799.5
    assert (owners.owner("old"), owners.owner("recent")) == (model, model)
    clock.now += 0.5  # "old" is an hour old
    assert (owners.owner("old"), owners.owner("recent")) == (None, model)
    clock.now += 1800
    assert prometheus_text(owners.metrics()) == _metrics(0, 2, 0)


def test_a_stop_forgets_without_counting_a_drop() -> None:
    owners = ConversationOwners(clock=Clock())
    ticket = owners.remember("c", _instance("m"))
    owners.forget("c")
    assert ticket.stopped.is_set() and owners.owner("c") is None
    assert (len(owners), owners.n_dropped, owners.n_expired) == (0, 0, 0)


def test_the_router_reports_its_conversations_at_metrics(running: list[Running], router_models: Path) -> None:
    plain = start_router(running, router_models)
    assert httpx.get(plain.url + "/metrics", timeout=10).status_code == 501  # as a model's server without --metrics
    router = start_router(running, router_models, "--metrics")
    body = {"model": "text", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    headers = {"X-Conversation-Id": "c-1"}
    # Remembered before its model would load: no autoload, so no child starts, and the request is refused.
    refused = httpx.post(router.url + "/v1/chat/completions?autoload=false", json=body, headers=headers, timeout=10)
    assert refused.status_code == 400
    metrics = httpx.get(router.url + "/metrics", timeout=10)
    assert metrics.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert metrics.text == _metrics(1, 0, 0)
