"""One fuzzer over every route of a router with two real children: the children's OpenAPI schema (fetched through
the router's ``/upstream/``) with a model named in each case, the router's own routes, Ollama's bodies, every
sampler field with odd values, and media parts (good and broken pictures, audio, videos, HLS playlists, concat
lists, MP4s with absurd box sizes), with a loopback canary's address in every URL-shaped field.

Whatever arrives: no 5xx but the deliberate 501s, a 4xx in its family's error shape, no connection to the canary,
no child that exits unasked and no error logged, and every child serving after. The figures (requests, 2xx, 4xx
and 501s by route family, other 5xx, canary connections, and the children's exits, counted from the router's
``/models/sse``, read throughout) are printed. About 20 s in the default run here; ``pytest -m slow`` runs the long
one (about 2.5 minutes).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lfmserve.testing import TinyLfm2, TinyProjector, video_bytes, write_lfm2_gguf, write_mmproj_gguf
from lfmserve.testing.hub import fake_hub
from tests.api.test_fuzz import OPERATIONS, WireRequest, check_answer, fuzz, send, wire_request
from tests.canary import Canary
from tests.conftest import Running, ServerThread
from tests.router.conftest import chat, entries, start_router
from tests.router.fuzz_requests import (
    AUTOLOADS,
    HUB_REPO,
    MEDIA_MARKER,
    MODEL_NAMES,
    MODELS,
    canary_urls,
    media_requests,
    media_sources,
    plant,
    router_requests,
    sampler_sweep,
    sampling_requests,
)


@dataclass(frozen=True, slots=True)
class Budget:
    """Examples per schema operation, and for each of the fuzzer's own strategies; whether the sampler sweep sends
    every field every odd value (else one each)."""

    per_operation: int
    media: int
    sampling: int
    router: int
    every_value: bool


DEFAULT = Budget(per_operation=2, media=80, sampling=50, router=50, every_value=False)
SLOW = Budget(per_operation=40, media=2000, sampling=1000, router=1000, every_value=True)
#: The route families requests and answers are counted by; every path falls in one (see :func:`family`).
FAMILIES = ("openai", "anthropic", "responses", "native", "ollama", "streams", "router", "upstream")
_ROUTER_OWN = frozenset(
    {"/health", "/v1/health", "/models", "/v1/models", "/models/load", "/models/unload", "/running", "/unload"}
)
_OPENAI_BARE = frozenset(
    {"/chat/completions", "/chat/completions/input_tokens", "/completions", "/embeddings", "/audio/transcriptions"}
)


def family(path: str) -> str:
    """``/upstream/...`` (llama-swap's), Ollama's (``/`` and ``/api/...``), the router's own, Anthropic's, the
    Responses API's, the resumable streams', OpenAI's (``/v1/...`` and their bare forms), else llama-server's own
    (``/completion``, ``/tokenize``, ``/props``, ``/slots``...; and any path no route has)."""
    bare = path.removeprefix("/v1")
    if path.startswith("/upstream/"):
        return "upstream"
    if path == "/" or path.startswith("/api/"):
        return "ollama"
    if path in _ROUTER_OWN:
        return "router"
    if bare.startswith("/messages"):
        return "anthropic"
    if bare.startswith("/responses"):
        return "responses"
    if path.startswith("/v1/stream"):
        return "streams"
    if path.startswith("/v1/") or path in _OPENAI_BARE:
        return "openai"
    return "native"


@dataclass(slots=True)
class Figures:
    """What the fuzz sent, by route family; how the router answered, by status class; its 4xx and its deliberate
    501s (a feature lfmserve or that model does not have), by route family."""

    requests: Counter[str] = field(default_factory=Counter)
    by_class: Counter[str] = field(default_factory=Counter)
    client_errors: Counter[str] = field(default_factory=Counter)
    not_supported: Counter[str] = field(default_factory=Counter)
    canary_connections: int = 0

    def count(self, request: WireRequest, status: int) -> None:
        route = family(request.path)
        self.requests[route] += 1
        self.by_class[f"{status // 100}xx"] += 1
        if 400 <= status < 500:
            self.client_errors[route] += 1
        if status == 501:
            self.not_supported[route] += 1

    def line(self) -> str:
        def by_family(counts: Counter[str]) -> str:
            return ", ".join(f"{name} {counts[name]}" for name in FAMILIES)

        other_5xx = self.by_class["5xx"] - self.not_supported.total()
        return (
            f"router fuzz: {self.requests.total()} requests, 2xx {self.by_class['2xx']}, 3xx {self.by_class['3xx']}, "
            f"4xx {self.by_class['4xx']} ({by_family(self.client_errors)}), 501 {self.not_supported.total()} "
            f"({by_family(self.not_supported)}), other 5xx {other_5xx}, canary connections {self.canary_connections}"
        )


class ModelEvents:
    """The router's ``/models/sse``, read on a thread from before the fuzz until the router stops (the one route
    the fuzz does not send to: its stream never ends): each child's start, load and exit."""

    def __init__(self, url: str) -> None:
        self.events: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self._connection = http.client.HTTPConnection(urlsplit(url).netloc)
        self._connection.request("GET", "/models/sse")
        self._stream = self._connection.getresponse()
        assert self._stream.status == 200
        self._thread = threading.Thread(target=self._read, name="model-events", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for line in self._stream:
                if line.startswith(b"data: "):
                    with self._changed:
                        self.events.append(json.loads(line[6:]))
                        self._changed.notify_all()
        except (http.client.HTTPException, OSError):
            pass  # the stream ends with the router, however it is cut

    def wait_for(self, holds: Callable[[list[dict[str, Any]]], bool], timeout_s: float) -> bool:
        """Whether the events read so far come to satisfy ``holds`` within ``timeout_s``."""
        with self._changed:
            return self._changed.wait_for(lambda: holds(self.events), timeout_s)

    def exits(self) -> list[tuple[str, int]]:
        with self._changed:
            return [
                (event["model"], event["data"]["exit_code"])
                for event in self.events
                if event.get("data", {}).get("status") == "unloaded"
            ]

    def close(self) -> None:
        """After the router has stopped (which ends the stream)."""
        self._thread.join(30)
        self._connection.close()


@pytest.fixture(scope="module")
def fuzz_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``text.gguf`` (with embeddings, slot files and metrics on, so their routes are reached) and ``vision/`` (its
    projector reads pictures, audio and video), small contexts so a fuzzed generation ends soon."""
    root = tmp_path_factory.mktemp("fuzz-router")
    models = root / "models"
    (models / "vision").mkdir(parents=True)
    write_lfm2_gguf(models / "text.gguf", TinyLfm2(seed=1))
    write_lfm2_gguf(models / "vision" / "model.gguf", TinyLfm2(seed=1, vision_tokens=True, name="Tiny-vision"))
    write_mmproj_gguf(models / "vision" / "mmproj-vision.gguf", TinyProjector(kind="both"))
    (root / "slots").mkdir()
    (root / "preset.ini").write_text(
        f"version = 1\n\n[*]\nctx-size = 1024\nmetrics = true\nslot-save-path = {root / 'slots'}\n\n"
        "[text]\nembeddings = true\npooling = mean\n"
    )
    return root


@pytest.fixture(scope="module")
def canary() -> Iterator[Canary]:
    with Canary() as listener:
        yield listener


@dataclass(slots=True)
class RouterFuzzer:
    """Sends each request on one keep-alive connection to the router, checks the answer, counts it."""

    router: Running
    canary: Canary
    events: ModelEvents
    connection: http.client.HTTPConnection
    figures: Figures = field(default_factory=Figures)
    #: The canary's count after the last request.
    connections: int = 0

    def check(self, request: WireRequest) -> None:
        response, raw = send(self.connection, request)
        self.figures.count(request, response.status)
        check_answer(self.connection, request, response, raw, shape_path=_shape_path(request.path))
        # Each request's own count: a connection names the request that made it (and hypothesis, shrinking, then
        # finds the smallest that makes one).
        connections = self.canary.settle()
        made, self.connections = connections - self.connections, connections
        self.figures.canary_connections += made
        assert made == 0, (made, request.method, request.target, (request.body or b"")[:2000])

    def run(self, strategy: st.SearchStrategy[WireRequest], examples: int) -> None:
        @given(request=strategy)
        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def each(request: WireRequest) -> None:
            self.check(request)

        each()


def _shape_path(path: str) -> str:
    """The path whose family's error shape an answer takes: through ``/upstream/{model}/``, the child's route."""
    if path.startswith("/upstream/"):
        model, slash, rest = path.removeprefix("/upstream/").partition("/")
        if model in MODELS and slash:
            return "/" + rest
    return path


@pytest.fixture(scope="module")
def fuzzer(fuzz_models: Path, canary: Canary) -> Iterator[RouterFuzzer]:
    """The router with both children loaded, its events read from before the loads."""
    started: list[Running] = []
    hub = ServerThread(fake_hub(HUB_REPO, {})).start()  # a download's hub: it has no repo a fuzzed name finds
    try:
        router = start_router(
            started,
            fuzz_models,
            "--metrics",
            preset=fuzz_models / "preset.ini",
            env={"LLAMA_MEDIA_MARKER": MEDIA_MARKER, "HF_ENDPOINT": hub.url},
        )
        events = ModelEvents(router.url)
        try:
            _listen_then_load(router, events)
            with contextlib.closing(http.client.HTTPConnection(urlsplit(router.url).netloc, timeout=120)) as connection:
                yield RouterFuzzer(router, canary, events, connection)
        finally:
            router.stop()
            events.close()
    finally:
        for running in started:
            running.stop()
        hub.stop()


def _listen_then_load(router: Running, events: ModelEvents) -> None:
    """Once the event stream listens (a reload, which changes nothing here, makes an event it reports), load both
    models."""
    deadline = time.monotonic() + 60
    while not events.wait_for(lambda seen: any(event["event"] == "models_reload" for event in seen), 0.5):
        assert time.monotonic() < deadline, "the router's events never reached the listener"
        assert httpx.get(router.url + "/models?reload=1", timeout=30).status_code == 200
    for model in MODELS:
        assert httpx.post(router.url + "/models/load", json={"model": model}, timeout=30).status_code == 200
    loaded = {(model, "loaded") for model in MODELS}
    assert events.wait_for(lambda seen: loaded <= {(e["model"], e.get("data", {}).get("status")) for e in seen}, 60)


def addressed(case: Any, model: str | None, autoload: str | None, url: str) -> WireRequest:
    """A schema case naming ``model`` (its body's ``model``, else ``?model=``), with ``?autoload=`` and the canary's
    ``url`` in every URL-shaped field."""
    if isinstance(case.body, dict):
        case.body = plant({**case.body, **({} if model is None else {"model": model})}, url)
    elif model is not None:
        case.query = {**(case.query or {}), "model": model}
    request = wire_request(case)
    if autoload is None:
        return request
    joiner = "&" if "?" in request.target else "?"
    return WireRequest(
        request.method, request.target + joiner + urlencode({"autoload": autoload}), request.headers, request.body
    )


def fuzz_everything(fuzzer: RouterFuzzer, budget: Budget, clip: bytes, report: Callable[[str], None]) -> None:
    fuzzer.figures = Figures()
    exits_before = len(fuzzer.events.exits())
    urls = canary_urls(fuzzer.canary)
    schema = schemathesis.openapi.from_url(fuzzer.router.url + "/upstream/text/openapi.json")

    def dress(cases: st.SearchStrategy[Any]) -> st.SearchStrategy[WireRequest]:
        return st.builds(addressed, cases, MODEL_NAMES, AUTOLOADS, st.sampled_from(urls))

    assert sorted(fuzz(schema, budget.per_operation, fuzzer.check, dress)) == sorted(OPERATIONS)
    fuzzer.run(media_requests(media_sources(fuzzer.canary, clip)), budget.media)
    for request in sampler_sweep(every_value=budget.every_value):
        fuzzer.check(request)
    fuzzer.run(sampling_requests(), budget.sampling)
    # One request onto a child's route whatever the draw: /upstream/ is one branch of ten, which 50 draws can miss.
    fuzzer.check(WireRequest("GET", f"/upstream/{MODELS[0]}/props"))
    fuzzer.run(router_requests(sorted({path for label in OPERATIONS for path in label.split()[1:]})), budget.router)

    figures = fuzzer.figures
    exits = Counter(code for _, code in fuzzer.events.exits()[exits_before:])
    report(f"{figures.line()}, child exits by code {dict(exits)}")
    assert figures.canary_connections == 0
    assert figures.by_class["5xx"] == figures.not_supported.total()
    assert sorted(figures.requests) == sorted(FAMILIES)  # every family was reached
    assert figures.by_class["2xx"] > 0
    _assert_every_child_serves(fuzzer)


def _assert_every_child_serves(fuzzer: RouterFuzzer) -> None:
    """No child exited unasked during the fuzz and nothing failed unhandled: the router logs either at ERROR (a
    child's exit it did not ask for, a load that failed; a child, a 500's traceback). A stop asked for is no error,
    even a kill of a child still loading (exit -9: ``/models/load`` answers at once, and an unload may follow). None
    is marked failed, and each answers after (loaded again if the fuzz unloaded it)."""
    errors = [line for line in fuzzer.router.log().splitlines() if " ERROR " in line or "Traceback" in line]
    assert errors == []
    for model in MODELS:
        reply = chat(fuzzer.router, model, temperature=0)
        assert reply.status_code == 200, reply.text
        assert reply.json()["model"] == model
    for model, entry in entries(fuzzer.router).items():
        assert "failed" not in entry["status"], (model, entry["status"])


@pytest.fixture
def report(capsys: pytest.CaptureFixture[str], record_property: Callable[[str, object], None]) -> Callable[[str], None]:
    """Shows the fuzz's figures in the run's output (captured or not) and records them in its JUnit XML."""

    def show(line: str) -> None:
        with capsys.disabled():
            print(f"\n{line}")
        record_property("router_fuzz", line)

    return show


@pytest.fixture(scope="module")
def clip(ffmpeg: tuple[str, str]) -> bytes:
    data = video_bytes(1.0, 64, 48, rate=4)
    assert data is not None
    return data


def test_every_route_of_a_router_with_two_children_answers_fuzzed_input_below_500_and_reaches_nothing(
    fuzzer: RouterFuzzer, clip: bytes, report: Callable[[str], None]
) -> None:
    fuzz_everything(fuzzer, DEFAULT, clip, report)


@pytest.mark.slow
def test_every_route_of_a_router_answers_a_long_fuzz_below_500_and_reaches_nothing(
    fuzzer: RouterFuzzer, clip: bytes, report: Callable[[str], None]
) -> None:
    fuzz_everything(fuzzer, SLOW, clip, report)


def test_an_upstream_path_reaches_the_child_as_the_client_escaped_it(fuzzer: RouterFuzzer) -> None:
    """Found by this fuzzer: ``/upstream/text/%1F`` was a 500 (the decoded control character made no URL), and an
    escaped ``?`` reached the child as the start of its query. Each is now the child's own 404 for the path, named as
    it names it (starlette shows ``?`` and ``#`` escaped)."""
    for sent, path in (
        ("%1F", "/\x1f"),
        ("props%3Fmodel=x", "/props%3Fmodel=x"),
        ("caf%C3%A9", "/café"),
        ("a%23b", "/a%23b"),
    ):
        response = httpx.get(f"{fuzzer.router.url}/upstream/text/{sent}", timeout=30)
        assert (response.status_code, response.json()["error"]["message"]) == (404, f"File Not Found: {path}")
    props = httpx.get(f"{fuzzer.router.url}/upstream/text/props?model=x", timeout=30)
    assert (props.status_code, props.json()["model_alias"]) == (200, "text")
