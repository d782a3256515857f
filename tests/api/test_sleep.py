"""``--sleep-idle-seconds``: the model unloaded when idle, answered from the recording while asleep, loaded again
by the first request that needs it (over real loopback HTTP, one server per test). The servers count their idle
time on a clock the test moves (:class:`Clock`), so one falls asleep when the test says, and never under a test
that is slow to send its next request; the last test shows the real clock doing the same."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.api.sleep import Sleeper
from lfmserve.api.state import AppState
from lfmserve.chat.serving import Serving
from lfmserve.loading.loader import load_serving
from lfmserve.settings import Settings
from tests.conftest import GREEDY, ServerThread, post, serve

PROMPT = {"prompt": "Once upon a time", "n_predict": 12, "temperature": 0}


@pytest.fixture
def servers() -> Iterator[list[ServerThread]]:
    started: list[ServerThread] = []
    yield started
    for server in started:
        server.stop()


class Clock:
    """A sleeper's clock that only the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


#: The clock each server counts its idle time on, where the test moves it.
CLOCKS: dict[ServerThread, Clock] = {}


@pytest.fixture
def start(servers: list[ServerThread], tiny_gguf: Path) -> Iterator[Callable[..., ServerThread]]:
    """A server on the tiny model that sleeps after 1 s idle on a :class:`Clock` (on the real clock with
    ``real_clock=True``); ``options`` change its settings."""

    def start(load: Callable[[], Serving] | None = None, real_clock: bool = False, **options: Any) -> ServerThread:
        settings = Settings.of(model=str(tiny_gguf), ctx_size=1024, parallel=1, threads=1, sleep_idle_seconds=1)
        clock = Clock()
        server = serve(settings.replace(**options), load, sleep_clock=time.monotonic if real_clock else clock)
        servers.append(server)
        if not real_clock:
            CLOCKS[server] = clock
        server.wait_ready()
        return server

    yield start
    for server in servers:
        CLOCKS.pop(server, None)


def state_of(server: ServerThread) -> AppState:
    state: AppState = server.server.config.app.state.app_state  # type: ignore[union-attr]
    return state


def is_sleeping(server: ServerThread, **headers: str) -> bool:
    response = httpx.get(server.url + "/props", headers=headers)
    assert response.status_code == 200
    sleeping: bool = response.json()["is_sleeping"]
    return sleeping


def wait_asleep(server: ServerThread, **headers: str) -> None:
    """Let the server's idle time pass: its clock moved past it and its sleeper asked to look now (on the real clock,
    waited for, up to 10 s)."""
    sleeper: Sleeper = server.server.config.app.state.sleeper  # type: ignore[union-attr]
    clock = CLOCKS.get(server)
    if clock is not None:
        clock.now += sleeper.idle_s
        loop = server.server.servers[0].get_loop()
        asyncio.run_coroutine_threadsafe(sleeper.settle_idle(), loop).result(timeout=60)
        assert is_sleeping(server, **headers)
        return
    deadline = time.monotonic() + 10
    while not is_sleeping(server, **headers):
        assert time.monotonic() < deadline, "the server did not go to sleep"
        time.sleep(0.05)


def test_the_model_is_freed_when_idle_and_a_request_after_sleep_answers_the_same(
    start: Callable[..., ServerThread],
) -> None:
    server = start()
    before = post(server, "/completion", PROMPT).json()["content"]
    assert not is_sleeping(server)
    wait_asleep(server)
    state = state_of(server)
    assert state.serving is None and state.metrics is None and state.sleeping
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    models = httpx.get(server.url + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["tiny-lfm2.gguf"]
    # The same entry on both paths; ``created`` is the time of the request, as llama-server's (a second may pass).
    other = httpx.get(server.url + "/models").json()["data"]
    assert [{**m, "created": 0} for m in other] == [{**m, "created": 0} for m in models["data"]]
    assert is_sleeping(server)  # none of those woke it
    after = post(server, "/completion", PROMPT)
    assert after.status_code == 200 and after.json()["content"] == before  # greedy: the same model again
    assert not is_sleeping(server) and state.serving is not None and not state.sleeping


def test_props_while_asleep_are_the_same_but_for_is_sleeping(start: Callable[..., ServerThread]) -> None:
    server = start()
    awake = httpx.get(server.url + "/props").json()
    wait_asleep(server)
    asleep = httpx.get(server.url + "/props").json()
    assert awake.pop("is_sleeping") is False and asleep.pop("is_sleeping") is True
    assert awake.pop("memory")["weights"] == asleep.pop("memory")["weights"]  # memory as it went to sleep
    assert asleep == awake


def test_metrics_while_asleep_report_the_last_window_once_then_rates_of_zero(
    start: Callable[..., ServerThread],
) -> None:
    server = start(metrics=True)
    assert post(server, "/completion", {**PROMPT, "ignore_eos": True}).status_code == 200
    wait_asleep(server)

    def scrape() -> dict[str, float]:
        response = httpx.get(server.url + "/metrics")
        assert response.status_code == 200 and response.headers["process-start-time-unix"].isdigit()
        lines = (line.split(" ") for line in response.text.splitlines() if line.startswith("llamacpp:"))
        return {name: float(value) for name, value in lines}

    first, second, third = scrape(), scrape(), scrape()
    assert first["llamacpp:predicted_tokens_seconds"] > 0 and first["llamacpp:tokens_predicted_total"] == 12
    assert second["llamacpp:predicted_tokens_seconds"] == 0 and second == third
    assert second["llamacpp:tokens_predicted_total"] == 12
    assert is_sleeping(server)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/tokenize", {"content": "Hello"}),
        ("/v1/chat/completions/input_tokens", {"messages": [{"role": "user", "content": "Hello"}]}),
        ("/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "Hello"}]}),
        ("/slots", None),
    ],
)
def test_requests_that_need_the_model_wake_it(
    start: Callable[..., ServerThread], path: str, body: dict[str, Any] | None
) -> None:
    server = start()
    wait_asleep(server)
    if body is None:
        response = httpx.get(server.url + path)
    else:
        response = post(server, path, body)
    assert response.status_code == 200
    assert not is_sleeping(server)


def test_a_request_without_a_valid_key_wakes_nothing(start: Callable[..., ServerThread]) -> None:
    server = start(api_key=("k1",))
    key = {"Authorization": "Bearer k1"}
    wait_asleep(server, **key)
    assert httpx.post(server.url + "/completion", json=PROMPT).status_code == 401
    assert is_sleeping(server, **key)


@pytest.mark.slow  # about 5 s: a generation that outlasts the idle time
def test_a_generation_longer_than_the_idle_time_is_not_unloaded_under_it(start: Callable[..., ServerThread]) -> None:
    server = start(ctx_size=4096, real_clock=True)  # the idle time must pass while it generates
    t0 = time.monotonic()
    body = {"prompt": "Hi", "n_predict": 3000, "ignore_eos": True, "temperature": 0}
    response = post(server, "/completion", body)
    assert time.monotonic() - t0 > 1.2, "the generation must outlast the idle time for this test to mean anything"
    assert response.status_code == 200 and response.json()["timings"]["predicted_n"] == 3000
    assert not is_sleeping(server)  # the idle time starts at its end


def test_requests_arriving_asleep_share_one_load(start: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    loads: list[float] = []

    def load() -> Serving:
        loads.append(time.monotonic())
        return load_serving(settings, str(tiny_gguf))

    settings = Settings.of(model=str(tiny_gguf), ctx_size=1024, parallel=2, threads=1, sleep_idle_seconds=1)
    server = start(load, parallel=2)
    wait_asleep(server)
    answers: list[str] = []

    def ask() -> None:
        answers.append(post(server, "/v1/chat/completions", CHAT).json()["choices"][0]["message"]["content"])

    clients = [threading.Thread(target=ask) for _ in range(4)]
    for client in clients:
        client.start()
    for client in clients:
        client.join(timeout=60)
    assert len(loads) == 2  # at start, then one wake for all four
    assert len(answers) == 4 and len(set(answers)) == 1


CHAT = {"messages": [{"role": "user", "content": "Hi"}], **GREEDY}


def test_a_failed_reload_answers_503_and_the_next_request_tries_again(
    start: Callable[..., ServerThread], tiny_gguf: Path
) -> None:
    calls = 0

    def load() -> Serving:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("disk gone")
        return load_serving(settings, str(tiny_gguf))

    settings = Settings.of(model=str(tiny_gguf), ctx_size=1024, parallel=1, threads=1)
    server = start(load)
    wait_asleep(server)
    failed = post(server, "/completion", PROMPT)
    assert (failed.status_code, failed.json()) == (
        503,
        {"error": {"code": 503, "message": "Model failed to load: disk gone", "type": "unavailable_error"}},
    )
    assert is_sleeping(server)
    assert post(server, "/completion", PROMPT).status_code == 200
    assert not is_sleeping(server)


def test_without_the_flag_the_model_stays_loaded(start: Callable[..., ServerThread]) -> None:
    """Two servers alike but for the flag, the one without it started first: it has been idle at least as long
    as the other when that one has gone to sleep, and it has not."""
    plain = start(sleep_idle_seconds=-1)
    sleeper = start(real_clock=True)
    assert post(plain, "/completion", PROMPT).status_code == 200
    assert post(sleeper, "/completion", PROMPT).status_code == 200  # the sleeper's idle time starts after the other's
    wait_asleep(sleeper)
    assert state_of(sleeper).serving is None
    assert not is_sleeping(plain) and state_of(plain).serving is not None and not state_of(plain).sleeping
