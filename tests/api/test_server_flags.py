"""The server's own flags over real HTTP: --version, -cl, --api-prefix, HTTPS, --reuse-port, the CORS flags,
--ui-config and --sse-ping-interval, on a model's server and on the router."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from lfmserve.api.sockets import listen
from lfmserve.api.sse import sse
from lfmserve.settings import ServerSettings, Settings
from tests.conftest import Running, ServerThread, self_signed_certificate, serve, wait_healthy
from tests.router.test_catalog import _cache_model
from tests.test_cli import LFMSERVE

TINY = ["-c", "512", "-np", "1", "-t", "1"]
_CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _lfmserve(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    assert LFMSERVE is not None
    return subprocess.run([LFMSERVE, *argv], capture_output=True, text=True, timeout=60, env=env)


def test_version_prints_lfmserve_and_the_llama_cpp_build_then_exits_0() -> None:
    result = _lfmserve("--version", "-m", "never-read.gguf")
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[0] == f"version: {version('lfmserve')} (lfmserve)"
    assert re.fullmatch(
        rf"llama\.cpp \S+, commit [0-9a-f]{{7,}}(-dirty)?, through llama-cpp-python {version('llama-cpp-python')}",
        lines[1],
    )
    assert lines[2].startswith("system info: ") and len(lines) == 3


def test_cache_list_names_the_cached_models_as_hf_takes_them_then_exits_0(tmp_path: Path) -> None:
    env = {**os.environ, "LLAMA_CACHE": str(tmp_path / "cache")}
    assert _lfmserve("-cl", env=env).stdout == "number of models in cache: 0\n"
    _cache_model(tmp_path / "cache", "org/Beta-GGUF", "Beta-Q8_0.gguf")
    _cache_model(tmp_path / "cache", "org/Alpha-GGUF", "Alpha-Q4_K_M.gguf")
    result = _lfmserve("--cache-list", env=env)
    assert (result.returncode, result.stdout) == (
        0,
        "number of models in cache: 2\n   1. org/Alpha-GGUF:Q4_K_M\n   2. org/Beta-GGUF:Q8_0\n",
    )


def _trusting(cert: Path) -> httpx.Client:
    return httpx.Client(verify=ssl.create_default_context(cafile=str(cert)), timeout=60)


def _wait_https(server: Running, client: httpx.Client, url: str, timeout_s: float = 90) -> None:
    """Poll ``url`` until it answers 200."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert server.process.poll() is None, server.log()
        try:
            if client.get(url).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError(server.log())


def test_https_with_the_certificate_and_key_files(running: list[Running], tiny_gguf: Path, tmp_path: Path) -> None:
    cert, key = self_signed_certificate(tmp_path)
    assert LFMSERVE is not None
    server = Running([LFMSERVE, "-m", str(tiny_gguf), *TINY, "--ssl-cert-file", str(cert), "--ssl-key-file", str(key)])
    running.append(server)
    https = server.url.replace("http://", "https://")
    with _trusting(cert) as client:
        _wait_https(server, client, https + "/health")
        reply = client.post(https + "/v1/chat/completions", json=_CHAT)
    assert reply.status_code == 200 and reply.json()["object"] == "chat.completion"
    with pytest.raises(httpx.TransportError):  # no plain HTTP beside it
        httpx.get(server.url + "/health", timeout=10)
    assert f"listening on {https} (model" in server.log()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ssl-cert-file", "CERT"], "--ssl-cert-file and --ssl-key-file must be given together"),
        (["--ssl-cert-file", "CERT", "--ssl-key-file", "MISSING"], "--ssl-cert-file CERT / --ssl-key-file MISSING: "),
        (["--ui-config", "[1]"], "--ui-config: not a JSON object"),
        (["--ui-config", "{"], "--ui-config: not valid JSON: "),
        (["--ui-config-file", "MISSING"], "--ui-config-file MISSING: No such file or directory"),
        (["--api-key-file", "MISSING"], "--api-key-file MISSING: No such file or directory"),
    ],
)
def test_a_bad_tls_key_or_ui_config_flag_fails_at_start_with_one_line(
    flags: list[str], message: str, tiny_gguf: Path, tmp_path: Path
) -> None:
    cert, _ = self_signed_certificate(tmp_path)
    names = {"CERT": str(cert), "MISSING": str(tmp_path / "missing")}
    result = _lfmserve("-m", str(tiny_gguf), "--port", "0", *[names.get(f, f) for f in flags])
    expected = message.replace("CERT", str(cert)).replace("MISSING", str(tmp_path / "missing"))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("lfmserve: error: ")
    assert expected in result.stderr


@pytest.fixture(scope="module")
def prefixed(tiny_gguf: Path) -> Iterator[ServerThread]:
    """A server under ``--api-prefix /llm/`` (the trailing slash is dropped), its model loaded."""
    server = serve(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1, api_prefix="/llm/"))
    deadline = time.monotonic() + 60
    while httpx.get(server.url + "/llm/health").status_code != 200:
        assert time.monotonic() < deadline, "the model did not load"
        time.sleep(0.02)
    yield server
    server.stop()


def test_every_route_and_the_web_ui_are_served_under_the_api_prefix(prefixed: ServerThread) -> None:
    base = prefixed.url
    assert httpx.get(base + "/llm/health").json() == {"status": "ok"}
    assert httpx.get(base + "/llm/v1/models").json()["data"][0]["id"] == "tiny-lfm2.gguf"
    reply = httpx.post(base + "/llm/v1/chat/completions", json=_CHAT)
    assert reply.status_code == 200
    page = httpx.get(base + "/llm/")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert httpx.get(base + "/llm/app.js").status_code == 200
    bare = httpx.get(base + "/llm?x=1")
    assert (bare.status_code, bare.headers["location"]) == (307, "/llm/?x=1")  # the UI's relative URLs need the slash
    for outside in ("/health", "/v1/models", "/", "/llmx/health"):
        answer = httpx.get(base + outside)
        assert (answer.status_code, answer.json()) == (
            404,
            {"error": {"code": 404, "message": f"File Not Found: {outside}", "type": "not_found_error"}},
        ), outside


def test_the_cors_flags_shape_the_preflight_and_the_allowed_origin(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path
) -> None:
    server = server_factory(
        Settings.of(
            model=str(tiny_gguf),
            ctx_size=512,
            parallel=1,
            threads=1,
            cors_methods="GET, POST",
            cors_headers="Authorization, Content-Type",
            cors_credentials=False,
        )
    )
    preflight = httpx.options(server.url + "/v1/chat/completions", headers={"Origin": "https://a.example"})
    assert (preflight.status_code, preflight.content) == (200, b"")
    assert {k: v for k, v in preflight.headers.items() if k.startswith("access-control") or k == "vary"} == {
        "access-control-allow-origin": "*",  # no credentials: * itself, as llama-server sends it
        "access-control-allow-credentials": "false",
        "access-control-allow-methods": "GET, POST",
        "access-control-allow-headers": "Authorization, Content-Type",
    }
    health = httpx.get(server.url + "/health", headers={"Origin": "https://a.example"})
    assert health.headers["access-control-allow-origin"] == "*" and "vary" not in health.headers


def test_ui_config_reaches_the_web_ui_through_props(
    server_factory: Callable[..., ServerThread], tiny_gguf: Path, tmp_path: Path
) -> None:
    config = {"systemMessage": "Be brief.", "temperature": 0.3, "pasteLongTextToFileLen": 0}
    (tmp_path / "ui.json").write_text(json.dumps(config))
    common: dict[str, Any] = {"model": str(tiny_gguf), "ctx_size": 512, "parallel": 1, "threads": 1}
    from_file = server_factory(Settings.of(**common, ui_config_file=str(tmp_path / "ui.json")))
    assert httpx.get(from_file.url + "/props").json()["ui_settings"] == config
    inline = server_factory(
        Settings.of(**common, ui_config='{"temperature": 1}', ui_config_file=str(tmp_path / "ui.json"))
    )
    assert httpx.get(inline.url + "/props").json()["ui_settings"] == {"temperature": 1}  # --ui-config wins


def test_reuse_port_lets_a_second_socket_bind_the_port_the_server_listens_on(
    running: list[Running], tiny_gguf: Path
) -> None:
    assert LFMSERVE is not None
    server = Running([LFMSERVE, "-m", str(tiny_gguf), *TINY, "--reuse-port"])
    running.append(server)
    wait_healthy(server.url, server.process)
    with pytest.raises(OSError, match="couldn't bind HTTP server socket, hostname: 127.0.0.1"):
        listen(ServerSettings(port=server.port))
    second = listen(ServerSettings(port=server.port, reuse_port=True))
    assert second[0].getsockname()[1] == server.port
    second[0].close()


def test_a_silent_stream_gets_llama_servers_ping_until_its_next_event() -> None:
    go = asyncio.Event()

    async def chunks() -> AsyncIterator[dict[str, Any]]:
        yield {"n": 1}
        await go.wait()
        yield {"n": 2}

    async def stream(_: Request) -> Response:
        return sse(chunks(), done_marker=True, ping_s=0.05)

    async def release(_: Request) -> Response:
        go.set()
        return Response()

    app = Starlette(routes=[Route("/stream", stream), Route("/go", release, methods=["POST"])])
    server = ServerThread(app).start()
    try:
        frames: list[str] = []
        with httpx.stream("GET", server.url + "/stream", timeout=10) as response:
            for frame in response.iter_text():
                frames.append(frame)
                if frame == ":\n\n" and frames.count(":\n\n") == 1:
                    httpx.post(server.url + "/go")
        text = "".join(frames)
        assert re.fullmatch(r'data: \{"n": 1\}\n\n(:\n\n)+data: \{"n": 2\}\n\ndata: \[DONE\]\n\n', text), text
    finally:
        server.stop()


def test_the_router_serves_https_under_the_prefix_and_calls_its_children_plainly_at_their_root(
    running: list[Running], tiny_gguf: Path, tmp_path: Path
) -> None:
    cert, key = self_signed_certificate(tmp_path)
    (tmp_path / "models").mkdir()
    shutil.copy(tiny_gguf, tmp_path / "models" / "tiny.gguf")
    assert LFMSERVE is not None
    tls = ["--ssl-cert-file", str(cert), "--ssl-key-file", str(key)]
    router = Running([LFMSERVE, "--models-dir", str(tmp_path / "models"), *TINY, "--api-prefix", "/llm", *tls])
    running.append(router)
    base = router.url.replace("http://", "https://") + "/llm"
    with _trusting(cert) as client:
        _wait_https(router, client, base + "/health")
        reply = client.post(base + "/v1/chat/completions", json={"model": "tiny", **_CHAT})
        assert reply.status_code == 200, reply.text
        args = client.get(base + "/v1/models").json()["data"][0]["status"]["args"]
        assert not {"--ssl-cert-file", "--ssl-key-file", "--api-prefix"} & set(args)
        assert client.get(base + "/").status_code == 200  # the web UI
        assert client.get(base.removesuffix("/llm") + "/health").status_code == 404
