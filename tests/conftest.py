"""Shared fixtures: tiny GGUF models written by lfmserve.testing, and real servers on loopback."""

from __future__ import annotations

import asyncio
import datetime
import gc
import ipaddress
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import httpx
import openai
import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from starlette.types import ASGIApp

from lfmserve.api.app import create_app
from lfmserve.chat.serving import Serving
from lfmserve.llama.model import NativeModel
from lfmserve.llama.mtmd import Projector
from lfmserve.loading.loader import ModelFiles, load_serving
from lfmserve.settings import Settings, config_files
from lfmserve.testing import (
    TinyLfm2,
    TinyProjector,
    free_port,
    gemma3_270m_path,
    llama_server_weight_flags,
    write_lfm2_gguf,
    write_mmproj_gguf,
)
from tests import warm_start

#: The LFM chat templates are the models' data, kept out of the repository: in ``../shared/fixtures`` beside
#: the checkout, or where ``LFMSERVE_TEMPLATE_FIXTURES`` points.
_SHARED_TEMPLATES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "chat-templates"


def fixture_template(name: str) -> Path:
    """An LFM chat template fixture; the test skips when there are none (fails under ``LFMSERVE_REQUIRE_FIXTURES``)."""
    folder = Path(os.environ.get("LFMSERVE_TEMPLATE_FIXTURES", _SHARED_TEMPLATES))
    path = folder / name
    if not path.is_file():
        missing_fixture(
            f"chat template fixture {name} not found in {folder} "
            f"(put the templates in {_SHARED_TEMPLATES} or set LFMSERVE_TEMPLATE_FIXTURES)"
        )
    return path


def missing_fixture(reason: str) -> NoReturn:
    """Skip the test for a fixture this machine lacks; under ``LFMSERVE_REQUIRE_FIXTURES`` (CI) fail it instead."""
    if os.environ.get("LFMSERVE_REQUIRE_FIXTURES"):
        pytest.fail(reason)
    pytest.skip(reason)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection made. The modules, the API clients' types, hypothesis and every test module live
    as long as the worker, and a full collection during the run walks every object it tracks: after the freeze it
    walks only what the tests made (``lfmserve.router.preload`` freezes a fork server's imports the same way).
    docs/testing.md has the figures."""
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def no_machine_config_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """llama.cpp's config files are the machine's, so no test reads them: ``XDG_CONFIG_HOME`` is an empty folder
    (processes started with ``os.environ`` inherit it, as ``Running``'s do) and the ``/etc`` file one that does not
    exist. Session-wide, so that the servers module fixtures start are covered too; a test that writes a config
    file points ``XDG_CONFIG_HOME`` (or ``SYSTEM_CONFIG``) at its own folder with ``monkeypatch``."""
    home = tmp_path_factory.mktemp("config-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", str(home))
        patch.setattr(config_files, "SYSTEM_CONFIG", str(home / "missing" / "config.ini"))
        yield home


@pytest.fixture(scope="session", autouse=True)
def one_trusted_certificate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Trust one self-signed certificate. Each HTTP client builds an SSL context (``httpx.get`` makes a client
    per call, and so do the openai, anthropic and ollama clients and a router's proxy), and by default it reads
    certifi's whole CA bundle, which costs more CPU than a request on loopback. The tests speak plain HTTP, so
    ``SSL_CERT_FILE`` names one certificate instead. httpx reads the variable in clients that trust the
    environment (its default) made after this fixture starts, and processes the tests start inherit it. No real
    server is trusted. A test of TLS passes its own ``verify=`` context. docs/testing.md has the figures."""
    cert, _ = self_signed_certificate(tmp_path_factory.mktemp("trusted"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SSL_CERT_FILE", str(cert))
        yield cert


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files in ``folder``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture(scope="session")
def ffmpeg() -> tuple[str, str]:
    """ffmpeg and ffprobe from ``PATH``, for the video tests; they skip without them (fail under
    ``LFMSERVE_REQUIRE_FIXTURES``: ``.ci/run`` installs ffmpeg)."""
    tools = shutil.which("ffmpeg"), shutil.which("ffprobe")
    if tools[0] is None or tools[1] is None:
        missing_fixture("ffmpeg and ffprobe are not installed on this machine (apt-get install ffmpeg)")
    return tools[0], tools[1]


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def tiny_gguf(models_dir: Path) -> Path:
    return write_lfm2_gguf(models_dir / "tiny-lfm2.gguf", TinyLfm2(seed=1))


@pytest.fixture(scope="session")
def tiny_llama_gguf(models_dir: Path) -> Path:
    """An attention-only model (llama architecture), for KV shifting, which hybrid models cannot do."""
    return write_lfm2_gguf(models_dir / "tiny-llama.gguf", TinyLfm2(seed=2, arch="llama", name="Tiny-Llama-Test"))


@pytest.fixture(scope="session")
def vl_gguf(models_dir: Path) -> Path:
    """A tiny LFM2 with LFM2-VL's image tokens, to pair with a projector."""
    return write_lfm2_gguf(models_dir / "tiny-lfm2-vl.gguf", TinyLfm2(seed=1, vision_tokens=True, name="Tiny-LFM2-VL"))


@pytest.fixture(scope="session")
def mmproj_gguf(models_dir: Path) -> Path:
    """A tiny projector with both encoders (LFM2-VL's ``lfm2`` and LFM2-Audio's ``lfm2a``)."""
    return write_mmproj_gguf(models_dir / "tiny-mmproj.gguf", TinyProjector(kind="both"))


@pytest.fixture(scope="module")
def projector(vl_gguf: Path, mmproj_gguf: Path) -> Iterator[Projector]:
    """The tiny projector over the tiny VL model, one thread."""
    model = NativeModel(vl_gguf)
    loaded = Projector(str(mmproj_gguf), model, n_threads=1)
    yield loaded
    loaded.close()
    model.close()


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    return gemma3_270m_path()


class ServerThread:
    """uvicorn serving an app on 127.0.0.1, an OS-chosen port, in a background thread."""

    def __init__(self, app: object) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))  # type: ignore[arg-type]
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        return self

    @property
    def url(self) -> str:
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def wait_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        with httpx.Client() as client:
            while client.get(self.url + "/health").status_code != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError("model did not load")
                time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def serve(
    settings: Settings,
    load: Callable[[], Serving] | None = None,
    wrap: Callable[[ASGIApp], ASGIApp] | None = None,
    sleep_clock: Callable[[], float] = time.monotonic,
) -> ServerThread:
    """The app on loopback; ``wrap`` puts middleware around it (as a reverse proxy in front of it would be);
    ``--sleep-idle-seconds`` counts on ``sleep_clock``."""
    assert settings.source.model is not None
    files = ModelFiles(settings.source.model, settings.source.mmproj)
    app: ASGIApp = create_app(settings, load or (lambda: load_serving(settings, files)), sleep_clock=sleep_clock)
    return ServerThread(wrap(app) if wrap else app).start()


@pytest.fixture(scope="module")
def server_factory() -> Iterator[Callable[..., ServerThread]]:
    """Start servers for the module; each is stopped at the module's end."""
    started: list[ServerThread] = []

    def start(settings: Settings) -> ServerThread:
        server = serve(settings)
        server.wait_ready()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def tiny_server(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    return server_factory(Settings.of(model=str(tiny_gguf), ctx_size=2048, parallel=4, threads=2))


def vl_settings(vl_gguf: Path, mmproj_gguf: Path, **options: Any) -> Settings:
    """A server on the tiny LFM2-VL model with the tiny projector (one slot, one thread unless ``options`` say)."""
    return Settings.of(
        model=str(vl_gguf), mmproj=str(mmproj_gguf), **{"ctx_size": 4096, "parallel": 1, "threads": 1, **options}
    )


#: How long a test waits for a state a working server reaches: long enough that only a server that never reaches
#: it fails, however busy the machine is.
STATE_TIMEOUT_S = 120


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = STATE_TIMEOUT_S) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` once ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


async def wait_until_async(condition: Callable[[], bool], what: str, timeout_s: float = STATE_TIMEOUT_S) -> None:
    """:func:`wait_until` for a test's event loop: it polls with ``asyncio.sleep``, so the loop keeps serving."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.01)


def wait_healthy(url: str, process: subprocess.Popen[bytes] | warm_start.WarmProcess, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            assert process.poll() is None, (
                process.stderr.read().decode() if process.stderr else f"exited with {process.returncode}"
            )
            try:
                if client.get(url + "/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    raise TimeoutError(url)


#: The ``lfmserve`` command, as pip installed it.
LFMSERVE = shutil.which("lfmserve")


class Running:
    """An `lfmserve`-style command serving on a free loopback port, as a real process; ``port``: the one it listens
    on by its own means (``OLLAMA_HOST``), given no ``--port``. The ``lfmserve`` command starts warm (forked from a
    process that has imported lfmserve, :mod:`tests.warm_start`) unless ``cold``: a test whose point is the process
    image (``/proc``'s view of it, its memory, its threads) asks for an exec'd one."""

    def __init__(
        self, argv: list[str], env: dict[str, str] | None = None, port: int | None = None, *, cold: bool = False
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # A file, not a pipe: a server that logs more than a pipe holds (a router and its children, one line per
        # request) would block on a pipe nobody reads.
        self.output = tempfile.TemporaryFile()
        self._printed = ""
        command = [*argv, *([] if port else ["--port", str(self.port)])]
        environment = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | warm_start.WarmProcess
        if argv[0] == LFMSERVE and not cold:
            self.process = warm_start.start(command, environment, self.output)
        else:
            self.process = subprocess.Popen(command, stdout=self.output, stderr=subprocess.STDOUT, env=environment)

    def log(self) -> str:
        """What the process has printed so far (llama-server logs raw token bytes of random models)."""
        if self.output.closed:
            return self._printed
        self.output.seek(0)
        return self.output.read().decode(errors="replace")

    def stop(self) -> str:
        """Stop the process (if it still runs) and close its output; what it printed."""
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self._printed = self.log()
        self.output.close()
        return self._printed


@pytest.fixture
def running() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for r in started:
        r.stop()


#: llama-server built from the pinned llama.cpp (``python bench/compare_llama_server.py --build`` makes it).
LLAMA_SERVER = Path(
    os.environ.get("LLAMA_SERVER", Path.home() / ".cache/lfmserve-bench/llama.cpp-build/bin/llama-server")
)
#: For the side-by-side tests: skipped where the benchmark has not built llama-server.
needs_llama_server = pytest.mark.skipif(
    not LLAMA_SERVER.exists(), reason=f"no llama-server at {LLAMA_SERVER} (set LLAMA_SERVER)"
)


def start_llama_server(running: list[Running], *flags: str) -> Running:
    """llama-server with ``flags`` as a real process, healthy, stopped with the test's other processes."""
    server = Running([str(LLAMA_SERVER), *llama_server_weight_flags(), *flags])
    running.append(server)
    wait_healthy(server.url, server.process)
    return server


SEED_CHAT = {
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is machine learning?"},
    ],
    "temperature": 0.1,
    "top_k": 50,
    "repeat_penalty": 1.05,
    "max_tokens": 512,
}
GREEDY = {"temperature": 0, "max_tokens": 16}
TIMINGS_KEYS = {
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
}


def post(server: ServerThread, path: str, body: Any, **kwargs: Any) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60, **kwargs)


def sse_events(server: ServerThread, path: str, body: dict[str, Any]) -> list[str]:
    """Read an SSE response line by line, the way the seed's fetch reader does."""
    with httpx.stream("POST", server.url + path, json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return [line[6:] for line in response.iter_lines() if line.startswith("data: ")]


WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1, "maxLength": 12},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "detailed": {"type": "boolean"},
                "ratio": {"type": "number", "minimum": 0.25, "maximum": 0.75},
            },
            "required": ["city", "days"],
        },
    },
}

SEARCH: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "web.search",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "maxLength": 10},
                "filters": {
                    "type": "object",
                    "properties": {"site": {"type": "string", "maxLength": 8}, "n": {"type": "integer"}},
                    "required": ["n"],
                },
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 3},
            },
            "required": ["query", "tags"],
        },
    },
}

TOOLS = [WEATHER, SEARCH]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def tools_server(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> ServerThread:
    """Room for tool lists: the tiny vocabulary spends a token on almost every JSON character."""
    return server_factory(Settings.of(model=str(tiny_gguf), ctx_size=8192, parallel=2, threads=2))


@pytest.fixture(scope="module")
def client(tools_server: ServerThread) -> openai.OpenAI:
    """The official OpenAI client of ``tools_server``."""
    return openai.OpenAI(base_url=tools_server.url + "/v1", api_key="not-needed")


def route_paths(routes: Iterable[object], prefix: str = "") -> Iterator[str]:
    """The paths of ``routes``, looking inside mounts and included routers (FastAPI wraps an included router in a
    route of its own that has no ``path``)."""
    for route in routes:
        path = getattr(route, "path", None)
        router = getattr(route, "original_router", None)
        if router is not None:
            context = getattr(route, "include_context", None)
            yield from route_paths(getattr(router, "routes", []), prefix + str(getattr(context, "prefix", "") or ""))
        elif isinstance(path, str) and hasattr(route, "routes"):
            yield from route_paths(getattr(route, "routes", []), prefix + path)
        elif isinstance(path, str):
            yield prefix + path
