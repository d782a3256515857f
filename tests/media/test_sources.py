"""Where a media part's bytes come from: data URIs, base64, ``file://`` under ``--media-path``, and remote URLs
fetched under the policy's limits (a loopback origin in a thread stands in for the web)."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.errors import InvalidRequest
from lfmserve.media.sources import MediaPolicy, media_bytes
from lfmserve.testing import free_port

PARAM = "messages.0.content.1"
BODY = b"\x89PNG\r\n\x1a\n pretend pixels"
PRIVATE = MediaPolicy(fetch_private=True)
LIMIT = 100
#: Host names a fake resolver answers (no DNS query leaves the machine).
FAKE_DNS = {"camera.test": ["127.0.0.1"], "mixed.test": ["93.184.215.14", "127.0.0.1"], "v6.test": ["::1"]}


def _fetched(url: str, policy: MediaPolicy = PRIVATE) -> bytes:
    return asyncio.run(media_bytes(url, policy, param=PARAM))


def _refused(url: str, policy: MediaPolicy = PRIVATE) -> str:
    with pytest.raises(InvalidRequest) as info:
        asyncio.run(media_bytes(url, policy, param=PARAM))
    assert info.value.param == PARAM and info.value.status_code == 400
    return info.value.message


# -- data URIs and base64 ---------------------------------------------------------------------------


@pytest.mark.parametrize("mime", ["image/png", "image/jpeg", "audio/wav", "audio/mpeg", "video/mp4"])
def test_a_data_uri_of_an_image_audio_or_video_type_gives_its_bytes(mime: str) -> None:
    assert _fetched(f"data:{mime};base64,{base64.b64encode(BODY).decode()}") == BODY


def test_raw_base64_standard_url_safe_unpadded_or_wrapped_is_read() -> None:
    data = b"\xfb\xff\xbf?"  # "+/+/Pw==" in standard base64, "-_-_Pw" url-safe without padding
    assert _fetched("+/+/Pw==") == data
    assert _fetched("-_-_Pw") == data
    assert _fetched("data:image/png;base64,-_-_Pw") == data
    assert _fetched("aGVs\nbG8g d29y\r\nbGQ=") == b"hello world"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("data:text/plain;base64,aGVsbG8=", "Invalid uri format: data:text/plain;base64"),
        ("data:application/octet-stream;base64,aGVsbG8=", "Invalid uri format: data:application/octet-stream;base64"),
        ("data:" + "x" * 300 + ",aGVsbG8=", "Invalid uri format: data:" + "x" * 95),  # cut at 100 characters
        ("data:image/png,hello", "uri must be base64 encoded"),
        ("data:image/png;utf8,hello", "uri must be base64 encoded"),
        ("data:image/png;base64,aGVs,bG8=", "Invalid uri-encoded base64 value"),
        ("data:image/png;base64", "Invalid uri-encoded base64 value"),
        ("data:image/png;base64,@@@@", "Invalid base64 value"),
        ("data:image/png;base64,", "Invalid base64 value"),
        ("data:image/png;base64,aGVsbG8=x", "Invalid base64 value"),
        ("not base64 at all!", "Invalid base64 value"),
        ("", "Invalid base64 value"),
    ],
)
def test_a_malformed_data_uri_or_base64_value_is_refused_with_llama_servers_message(url: str, message: str) -> None:
    assert _refused(url) == message


# -- file:// ----------------------------------------------------------------------------------------


@pytest.fixture
def media_dir(tmp_path: Path) -> Path:
    """``media/`` with a file, a sub-folder, links in and out of it; ``secret.txt`` beside it."""
    root = tmp_path / "media"
    (root / "sub").mkdir(parents=True)
    (root / "front-door.jpg").write_bytes(BODY)
    (root / "sub" / "back-door.jpg").write_bytes(b"back")
    (tmp_path / "secret.txt").write_bytes(b"secret")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_bytes(b"secret")
    os.symlink(root / "front-door.jpg", root / "alias.jpg")
    os.symlink(tmp_path / "secret.txt", root / "leak.jpg")
    os.symlink("../outside", root / "out")
    return root


def test_file_urls_are_refused_without_a_media_path() -> None:
    message = _refused("file://front-door.jpg", MediaPolicy())
    assert message == "file:// URLs are not allowed unless --media-path is specified"


def test_a_file_url_reads_under_the_media_path_links_inside_it_included(media_dir: Path) -> None:
    policy = MediaPolicy(media_path=str(media_dir))
    assert _fetched("file://front-door.jpg", policy) == BODY
    assert _fetched("file://sub/back-door.jpg", policy) == b"back"
    assert _fetched("file://alias.jpg", policy) == BODY
    assert _fetched("file://front-door.jpg", MediaPolicy(media_path=str(media_dir) + "/")) == BODY


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("/front-door.jpg", BODY),  # llama-server appends the name to the folder, so extra separators collapse
        ("//sub//back-door.jpg", b"back"),
        ("./front-door.jpg", BODY),  # "." parts and ".x" names pass llama-server's check, and stay inside
        ("sub/./back-door.jpg", b"back"),
    ],
)
def test_a_file_url_with_a_leading_slash_or_empty_parts_reads_as_llama_server_does(
    media_dir: Path, name: str, body: bytes
) -> None:
    assert _fetched(f"file://{name}", MediaPolicy(media_path=str(media_dir))) == body


@pytest.mark.parametrize(
    "name",
    [
        "../secret.txt",
        "sub/../../secret.txt",
        "sub/../front-door.jpg",  # even a ".." that stays inside
        "front..door.jpg",  # llama-server refuses ".." anywhere in the name
        ".",
        "sub/.",
        "front-door.jpg ",
        " front-door.jpg",
        "..\\secret.txt",
        "leak.jpg",  # a link to a file outside
        "out/secret.txt",  # through a link to a folder outside
        "front-door.jpg\0.png",
        "front-door\x7f.jpg",
        "front-door\x85.jpg",
        "c:front-door.jpg",
        "front-door?.jpg",
        "sub\u2215back-door.jpg",
        "\ufefffront-door.jpg",
        "\udcff.jpg",
        "x" * 256,
        "é" * 128,  # 128 characters, but 256 bytes of UTF-8
        "",
    ],
)
def test_a_file_url_that_would_leave_the_media_path_or_fails_llama_servers_check_is_refused(
    media_dir: Path, name: str
) -> None:
    message = _refused(f"file://{name}", MediaPolicy(media_path=str(media_dir)))
    assert message == f"file path is not allowed: {name[:200]}"


def test_a_missing_file_or_a_folder_is_refused_by_name(media_dir: Path) -> None:
    policy = MediaPolicy(media_path=str(media_dir))
    assert _refused("file://nope.jpg", policy) == "file does not exist or cannot be opened: nope.jpg"
    assert _refused("file://sub", policy) == "file does not exist or cannot be opened: sub"
    assert _refused("file:///etc/passwd", policy) == "file does not exist or cannot be opened: /etc/passwd"
    assert _refused("file://sub\\back-door.jpg", policy).startswith("file does not exist")  # not a separator here
    (media_dir / ("é" * 125 + ".jpg")).write_bytes(b"long")
    assert _fetched(f"file://{'é' * 125}.jpg", policy) == b"long"  # 254 bytes, under llama-server's 255


def test_a_file_over_64_mib_is_refused_without_reading_it(media_dir: Path) -> None:
    with open(media_dir / "huge.bin", "wb") as handle:
        handle.truncate(64 * 2**20 + 1)  # sparse: no disk used
    assert _refused("file://huge.bin", MediaPolicy(media_path=str(media_dir))) == "huge.bin is larger than 64 MiB"


# -- http(s):// -------------------------------------------------------------------------------------


@dataclass
class Origin:
    """A loopback HTTP origin that records every connection it accepts and every request it answers."""

    url: str
    port: int
    connections: list[tuple[str, int]] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (path, Host header)
    release: threading.Event = field(default_factory=threading.Event)


def _handler(origin: Origin) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            origin.requests.append((self.path, self.headers.get("Host", "")))
            self.close_connection = True
            try:
                self._answer(self.path)
            except OSError:  # the client gave up first (limits, timeouts): expected
                pass

        def _answer(self, path: str) -> None:
            if path.startswith("/hop/"):  # /hop/N redirects N times (relative), then answers
                left = int(path.removeprefix("/hop/"))
                self._send(302, b"", location=f"/hop/{left - 1}") if left else self._send(200, b"landed")
            elif path == "/absolute":
                self._send(301, b"", location=f"{origin.url}/media.png")
            elif path == "/to-file":
                self._send(307, b"", location="file:///etc/passwd")
            elif path == "/media.png":
                self._send(200, BODY)
            elif path == "/exact":
                self._send(200, b"x" * LIMIT)
            elif path == "/declared-huge":  # a length header over the limit; what follows is never read
                self._send(200, b"x" * 10, length=10**9)
            elif path.startswith("/chunked/"):
                self._chunks(int(path.removeprefix("/chunked/")), pause_s=0)
            elif path == "/drip":  # each piece comes quickly, the whole not before the test ends (it releases it)
                self._chunks(10 * 1200, pause_s=0.05)
            elif path == "/slow":  # no answer until released (at the test's end)
                origin.release.wait(60)
                self._send(200, BODY)
            else:
                self._send(404, b"not here")

        def _send(self, status: int, body: bytes, *, location: str = "", length: int | None = None) -> None:
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            self.wfile.write(body)

        def _chunks(self, n_bytes: int, *, pause_s: float) -> None:
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, n_bytes, 10):
                piece = b"y" * min(10, n_bytes - start)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                if pause_s and origin.release.wait(pause_s):
                    return
            self.wfile.write(b"0\r\n\r\n")

    return Handler


class _CountingServer(ThreadingHTTPServer):
    daemon_threads = True
    origin: Origin

    def verify_request(self, request: Any, client_address: Any) -> bool:
        self.origin.connections.append(client_address)
        return True


@pytest.fixture
def origin() -> Iterator[Origin]:
    port = free_port()
    made = Origin(url=f"http://127.0.0.1:{port}", port=port)
    server = _CountingServer(("127.0.0.1", port), _handler(made))
    server.origin = made
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield made
    finally:
        made.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every connection the fetcher makes must go to 127.0.0.1; the fake names resolve without DNS."""
    real_send = httpx.AsyncClient.send
    real_getaddrinfo = asyncio.base_events.BaseEventLoop.getaddrinfo

    async def send(self: httpx.AsyncClient, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        assert request.url.host == "127.0.0.1", f"a connection to {request.url.host} was about to be made"
        return await real_send(self, request, **kwargs)

    async def getaddrinfo(self: asyncio.AbstractEventLoop, host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in FAKE_DNS:
            return [
                (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in FAKE_DNS[host]
            ]
        assert host in ("127.0.0.1", "::1"), f"{host} would need a DNS query"
        return await real_getaddrinfo(self, host, port, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(httpx.AsyncClient, "send", send)
    monkeypatch.setattr(asyncio.base_events.BaseEventLoop, "getaddrinfo", getaddrinfo)


def test_a_loopback_url_is_fetched_when_private_fetches_are_allowed(origin: Origin) -> None:
    assert _fetched(f"{origin.url}/media.png") == BODY
    assert origin.requests == [("/media.png", f"127.0.0.1:{origin.port}")]


def test_a_host_name_is_connected_to_at_its_checked_address_and_keeps_its_host_header(origin: Origin) -> None:
    assert _fetched(f"http://camera.test:{origin.port}/media.png") == BODY
    assert origin.requests == [("/media.png", f"camera.test:{origin.port}")]


@pytest.mark.parametrize(
    ("host", "address"),
    [("127.0.0.1", "127.0.0.1"), ("camera.test", "127.0.0.1"), ("mixed.test", "127.0.0.1"), ("v6.test", "::1")],
)
def test_a_private_address_is_refused_before_any_connection_naming_it(origin: Origin, host: str, address: str) -> None:
    message = _refused(f"http://{host}:{origin.port}/media.png", MediaPolicy())
    assert message == (
        f"media URL host {host} resolves to {address}, a loopback, private or link-local address; "
        "this server does not fetch from its own network (--media-fetch-private allows it)"
    )
    assert origin.connections == [] and origin.requests == []


def test_an_ipv6_loopback_literal_is_refused_before_any_connection(origin: Origin) -> None:
    message = _refused(f"http://[::1]:{origin.port}/media.png", MediaPolicy())
    assert message == (
        "media URL host ::1 resolves to ::1, a loopback, private or link-local address; "
        "this server does not fetch from its own network (--media-fetch-private allows it)"
    )
    assert origin.connections == []


def test_remote_media_are_refused_when_fetching_is_off(origin: Origin) -> None:
    message = _refused(f"{origin.url}/media.png", MediaPolicy(fetch=False, fetch_private=True))
    assert message == "remote media URLs are turned off on this server (--no-media-fetch)"
    assert origin.connections == []


@pytest.mark.parametrize("path", ["/media.png", "/exact", "/chunked/100"])
def test_a_body_up_to_the_limit_is_taken(origin: Origin, path: str) -> None:
    data = _fetched(f"{origin.url}{path}", MediaPolicy(fetch_private=True, max_remote_bytes=LIMIT))
    assert len(data) == (len(BODY) if path == "/media.png" else LIMIT)


@pytest.mark.parametrize("path", ["/declared-huge", "/chunked/101", "/chunked/100000"])
def test_a_body_over_the_limit_is_refused_by_its_length_header_or_as_it_streams(origin: Origin, path: str) -> None:
    message = _refused(f"{origin.url}{path}", MediaPolicy(fetch_private=True, max_remote_bytes=LIMIT))
    assert message == f"Failed to download image: larger than {LIMIT} bytes"


def test_five_redirects_are_followed_and_a_sixth_is_refused(origin: Origin) -> None:
    assert _fetched(f"{origin.url}/hop/5") == b"landed"
    assert [path for path, _ in origin.requests] == ["/hop/5", "/hop/4", "/hop/3", "/hop/2", "/hop/1", "/hop/0"]
    origin.requests.clear()
    assert _refused(f"{origin.url}/hop/6") == "Failed to download image: more than 5 redirects"
    assert len(origin.requests) == 6  # the seventh location is never asked for


def test_a_redirect_to_an_absolute_url_is_followed_and_one_off_http_is_refused(origin: Origin) -> None:
    assert _fetched(f"{origin.url}/absolute") == BODY
    assert _refused(f"{origin.url}/to-file") == "Failed to download image: not an http(s) URL: file:///etc/passwd"
    assert [path for path, _ in origin.requests] == ["/absolute", "/media.png", "/to-file"]


def test_an_http_error_status_is_refused_with_its_code(origin: Origin) -> None:
    assert _refused(f"{origin.url}/missing.png") == "Failed to download image: HTTP 404"


def test_a_closed_port_is_refused_as_a_failed_download() -> None:
    message = _refused(f"http://127.0.0.1:{free_port()}/media.png")
    assert re.fullmatch(r"Failed to download image: ConnectError: .+", message), message


@pytest.mark.parametrize("path", ["/slow", "/drip"])
def test_an_answer_not_complete_within_the_timeout_is_refused(origin: Origin, path: str) -> None:
    """``/slow`` sends nothing; ``/drip`` sends a piece every 50 ms, so only a deadline for the whole catches it
    (a timeout per read would fail with ``ReadTimeout``, or not at all). The whole never comes before the test
    ends, so the message is the verdict, not how long the refusal took."""
    message = _refused(f"{origin.url}{path}", MediaPolicy(fetch_private=True, timeout_s=0.3))
    assert message == "Failed to download image: no complete answer within 0.3 s"
