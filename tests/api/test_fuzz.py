"""Schemathesis over /openapi.json against a real server on loopback: every route and request model, fuzzed.

Whatever arrives, the server answers below 500; a 4xx is the API family's error shape (Ollama's under ``/api/``);
and the keep-alive connection the answer came on still serves the next request. About 20 s in the default run
(``FUZZ_EXAMPLES`` cases per operation); ``pytest -m slow`` runs ``FUZZ_EXAMPLES_SLOW``.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from lfmserve.settings import Settings
from tests.conftest import ServerThread

FUZZ_EXAMPLES = 8
FUZZ_EXAMPLES_SLOW = 300


@pytest.fixture(scope="module")
def fuzz_server(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> ServerThread:
    """Small slots, so a fuzzed generation ends soon; slot files, metrics and embeddings on, so their routes are
    reached."""
    save_dir = tmp_path_factory.mktemp("fuzz-slots")
    return server_factory(
        Settings.of(
            model=str(tiny_gguf),
            ctx_size=512,
            parallel=2,
            threads=1,
            metrics=True,
            embeddings=True,
            pooling="mean",
            slot_save_path=str(save_dir),
            props=True,
            max_body_bytes=2**20,
        )
    )


@pytest.fixture(scope="module")
def api_schema(fuzz_server: ServerThread) -> Any:
    return schemathesis.openapi.from_url(fuzz_server.url + "/openapi.json")


@pytest.fixture(scope="module")
def connection(fuzz_server: ServerThread) -> Iterator[http.client.HTTPConnection]:
    """One keep-alive connection for every case: a server that drops it silently fails the next request."""
    conn = http.client.HTTPConnection(urlsplit(fuzz_server.url).netloc, timeout=120)
    yield conn
    conn.close()


@dataclass(frozen=True, slots=True)
class WireRequest:
    """A request as it goes on the wire: what a fuzzer sends, and what its failure names."""

    method: str
    #: The path and the query.
    target: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]


def wire_request(case: Any) -> WireRequest:
    """A schemathesis case as bytes: its JSON written as given (NaN and infinities included), other bodies as is."""
    request = case.as_transport_kwargs(base_url="http://fuzzed")
    url = urlsplit(request["url"])
    target = url.path + ("?" + urlencode(request["params"], doseq=True) if request.get("params") else "")
    headers = {str(k): str(v) for k, v in request["headers"].items() if k.lower() != "accept-encoding"}
    body = None
    if "json" in request:
        body = json.dumps(request["json"], allow_nan=True).encode()
    elif request.get("data") is not None:
        body = request["data"] if isinstance(request["data"], bytes) else str(request["data"]).encode()
    return WireRequest(request["method"], target, headers, body)


#: uvicorn closes a connection idle for 5 s (its keep-alive timeout): a case generated slowly (a busy machine) goes
#: on a fresh connection instead of one the server may be closing. A drop right after an answer is still caught, as
#: :func:`check_answer` asks ``/health`` on the same connection at once.
IDLE_RECONNECT_S = 2.0
_last_answered: dict[int, float] = {}


def send(conn: http.client.HTTPConnection, request: WireRequest) -> tuple[http.client.HTTPResponse, bytes]:
    if time.monotonic() - _last_answered.get(id(conn), time.monotonic()) > IDLE_RECONNECT_S:
        conn.close()  # http.client connects again for the next request
    conn.request(request.method, request.target, body=request.body, headers=request.headers)
    response = conn.getresponse()
    raw = response.read()
    _last_answered[id(conn)] = time.monotonic()
    return response, raw


def check_answer(
    conn: http.client.HTTPConnection,
    request: WireRequest,
    response: http.client.HTTPResponse,
    raw: bytes,
    shape_path: str | None = None,
) -> None:
    """Below 500 (or a deliberate 501), a 4xx in the error shape of ``shape_path``'s family (the request's path
    unless given), and the connection still serving unless the server said it would close it."""
    shape_path = shape_path or request.path
    failure = (request.method, request.target, (request.body or b"")[:2000], raw[:500])
    # 501 is a deliberate answer (a feature this server does not have), in the error shape like the others.
    assert response.status < 500 or response.status == 501, failure
    if response.status >= 400 and shape_path.startswith("/api/"):  # Ollama's shape: {"error": "message"}
        error = json.loads(raw)["error"]
        assert isinstance(error, str) and error and "Traceback" not in error, failure
    elif response.status == 501:
        assert json.loads(raw)["error"]["type"] == "not_supported_error", failure
    if response.status >= 400 and not shape_path.startswith("/api/"):
        error = json.loads(raw)["error"]
        assert error["code"] == response.status and isinstance(error["message"], str) and error["message"], failure
        assert isinstance(error["type"], str) and "Traceback" not in error["message"], failure
    if not response.will_close:  # unless the server said it would close it, the connection goes on serving
        conn.request("GET", "/health")
        health = conn.getresponse()
        assert (health.status, health.read()) == (200, b'{"status":"ok"}')


def check_case(conn: http.client.HTTPConnection, case: Any) -> None:
    request = wire_request(case)
    check_answer(conn, request, *send(conn, request))


def fuzz(
    api_schema: Any,
    examples: int,
    check: Callable[[Any], None],
    dress: Callable[[st.SearchStrategy[Any]], st.SearchStrategy[Any]] = lambda cases: cases,
) -> list[str]:
    """``check`` of ``examples`` generated cases for every operation of the schema, valid ones and ones that break
    it (each made into what ``check`` takes by ``dress``: a router's fuzzer names a model in it); the operations
    fuzzed, by label.

    Hypothesis drives schemathesis' strategies directly (not its pytest plugin, which reads pytest internals).
    """
    labels = []
    for result in api_schema.get_all_operations():
        operation = result.ok()

        cases = st.one_of(
            operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE)
        )

        @given(case=dress(cases))
        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def run(case: Any) -> None:
            check(case)

        run()
        labels.append(operation.label)
    return labels


#: Every operation the server publishes: a route left out of the schema would not be fuzzed.
OPERATIONS = [
    "GET /health",
    "GET /v1/health",
    "GET /props",
    "POST /completion",
    "POST /completions",
    "POST /infill",
    "POST /tokenize",
    "POST /detokenize",
    "POST /apply-template",
    "GET /v1/models",
    "GET /models",
    "POST /v1/chat/completions",
    "POST /chat/completions",
    "POST /v1/chat/completions/control",
    "POST /v1/chat/completions/input_tokens",
    "POST /chat/completions/input_tokens",
    "POST /props",
    "POST /v1/completions",
    "GET /slots",
    "POST /slots/{id_slot}",
    "GET /metrics",
    "GET /lora-adapters",
    "POST /lora-adapters",
    "GET /v1/stream",
    "DELETE /v1/stream",
    "POST /v1/streams/lookup",
    "POST /v1/embeddings",
    "POST /embedding",
    "POST /embeddings",
    "POST /rerank",
    "POST /reranking",
    "POST /v1/rerank",
    "POST /v1/reranking",
    "POST /v1/audio/transcriptions",
    "POST /audio/transcriptions",
    "POST /v1/messages",
    "POST /v1/messages/count_tokens",
    "POST /v1/responses",
    "POST /responses",
    "POST /v1/responses/input_tokens",
    "POST /responses/input_tokens",
    "GET /",
    "GET /api/version",
    "GET /api/tags",
    "GET /api/ps",
    "POST /api/show",
    "POST /api/pull",
    "POST /api/chat",
    "POST /api/generate",
    "POST /api/embed",
    "POST /api/embeddings",
]


def test_every_route_answers_fuzzed_input_below_500_in_the_error_shape(
    api_schema: Any, connection: http.client.HTTPConnection
) -> None:
    assert sorted(fuzz(api_schema, FUZZ_EXAMPLES, lambda case: check_case(connection, case))) == sorted(OPERATIONS)


@pytest.mark.slow
def test_every_route_answers_more_fuzzed_input_below_500(
    api_schema: Any, connection: http.client.HTTPConnection
) -> None:
    checked = fuzz(api_schema, FUZZ_EXAMPLES_SLOW, lambda case: check_case(connection, case))
    assert sorted(checked) == sorted(OPERATIONS)
