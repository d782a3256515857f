"""The app's lifespan: every route answers 503 while the model loads (the web UI's files do not), and the server
reports a failed load."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from lfmserve.api.app import create_app
from lfmserve.chat.serving import Serving
from lfmserve.errors import EngineError
from lfmserve.loading.loader import load_serving
from lfmserve.settings import Settings
from tests.conftest import STATE_TIMEOUT_S, ServerThread, serve, wait_until


def test_health_is_503_until_the_model_has_loaded(tiny_gguf: Path) -> None:
    settings = Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1)
    release = threading.Event()

    def slow_load() -> Serving:
        release.wait(STATE_TIMEOUT_S)  # the test sets it; the timeout only frees a thread a broken test left
        return load_serving(settings, str(tiny_gguf))

    server = serve(settings, slow_load)
    try:
        for path in ("/health", "/v1/models", "/props"):
            response = httpx.get(server.url + path)
            assert response.status_code == 503
            assert response.json() == {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
        page = httpx.get(server.url + "/", headers={"Accept": "text/html"})
        assert page.status_code == 200  # the web UI, which says "Loading model" meanwhile
        release.set()
        server.wait_ready()
        assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    finally:
        release.set()
        server.stop()


def test_a_failed_load_is_reported_by_every_route_and_to_the_caller(tiny_gguf: Path) -> None:
    settings = Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1)
    failures: list[BaseException] = []

    def broken_load() -> Serving:
        raise EngineError("failed to load model from broken.gguf")

    server = ServerThread(create_app(settings, broken_load, on_load_error=failures.append)).start()
    try:
        wait_until(lambda: bool(failures), "the failed load is reported to the caller")
        for path in ("/health", "/v1/chat/completions"):
            response = httpx.get(server.url + path)
            assert response.status_code == 503
            assert response.json() == {
                "error": {
                    "code": 503,
                    "message": "Model failed to load: failed to load model from broken.gguf",
                    "type": "unavailable_error",
                }
            }
        assert [str(f) for f in failures] == ["failed to load model from broken.gguf"]
    finally:
        server.stop()
