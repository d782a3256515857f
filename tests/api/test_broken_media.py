"""Broken, hostile and mislabelled media sent to a real ``lfmserve`` process: each is a 400 naming its part,
the process lives on, and requests beside it are undisturbed."""

from __future__ import annotations

import asyncio
import base64
import functools
import io
import json
import re
import struct
import subprocess
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile
from PIL import Image

from lfmserve.testing import TinyProjector, write_mmproj_gguf
from tests.conftest import LFMSERVE, Running, wait_healthy

CHAT = "/v1/chat/completions"
PART = "messages.0.content.1"
FAILED = "Failed to load image or audio file"
NOT_AN_IMAGE = f"{FAILED}: not an image in a format read here (JPEG, PNG, GIF, BMP, TIFF, WEBP)"
NO_AUDIO = "audio input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
#: The tiny projector's 16392 position rows, at 50 per second.
MAX_AUDIO_S = 328


# -- media, made here -------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _png(width: int, height: int, seed: int = 0) -> bytes:
    """A picture of one tint (the seed's) with noise."""
    rng = np.random.default_rng(seed)
    tint = rng.integers(0, 256, 3)
    pixels = np.clip(tint + rng.integers(-24, 25, (height, width, 3)), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


def _jpeg(width: int = 64, height: int = 64) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((height, width, 3), 100, np.uint8)).save(buffer, "JPEG")
    return buffer.getvalue()


def _ico() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16)).save(buffer, "ICO")
    return buffer.getvalue()


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def _png_by_hand(width: int, height: int, bit_depth: int = 8, colour: int = 2, idat: bytes = b"") -> bytes:
    """A PNG whose IHDR says anything (Pillow cannot save a 0x0 image)."""
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour, 0, 0, 0)
    body = _png_chunk(b"IDAT", idat) if idat else b""
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + body + _png_chunk(b"IEND", b"")


@functools.cache
def _bomb() -> bytes:
    """A whole, valid 30000x30000 black 1-bit PNG: 107 KB here, 900 megapixels (2.7 GB of RGB) decoded."""
    width = height = 30000
    rows = (b"\x00" * (1 + width // 8)) * 1000  # filter byte + packed bits, 1000 rows at a time
    packer = zlib.compressobj(9)
    idat = b"".join([packer.compress(rows) for _ in range(height // 1000)] + [packer.flush()])
    return _png_by_hand(width, height, bit_depth=1, colour=0, idat=idat)


def _wav(seconds: float, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buffer = io.BytesIO()
    soundfile.write(buffer, (0.25 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate, format="WAV")
    return buffer.getvalue()


def _wav_header(n_data_bytes: int, rate: int = 16000) -> bytes:
    """A 16-bit mono PCM WAV header declaring ``n_data_bytes`` of samples, and no samples after it."""
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    riff = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", n_data_bytes)
    return b"RIFF" + struct.pack("<I", len(riff) + n_data_bytes) + riff


def _ten_hours_at_1_hz() -> bytes:
    """A real, complete 10-hour WAV in 72 KB: read at 16 kHz it would be 576 M samples (2.3 GB of float32)."""
    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros(10 * 3600, np.int16), 1, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def _image_part(data: bytes, mime: str = "image/png") -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{_b64(data)}"}}


def _url_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def _audio_part(data: bytes, fmt: str = "wav") -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": _b64(data), "format": fmt}}


def _chat(*parts: dict[str, Any], max_tokens: int = 4, **extra: Any) -> dict[str, Any]:
    content = [{"type": "text", "text": "What is in this?"}, *parts]
    return {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0, **extra}


# -- the servers ------------------------------------------------------------------------------------


@dataclass
class Served:
    """A running ``lfmserve`` (its output goes to a file, read by ``log``)."""

    running: Running

    @property
    def url(self) -> str:
        return self.running.url

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self.running.process

    @property
    def log(self) -> str:
        return self.running.log()

    def post(self, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(self.url + CHAT, json=body, timeout=60)

    def assert_alive(self) -> None:
        assert self.process.poll() is None, self.log
        assert httpx.get(self.url + "/health", timeout=10).status_code == 200

    def peak_rss_bytes(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        match = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.MULTILINE)
        assert match is not None
        return int(match.group(1)) * 1024

    def stop(self) -> None:
        self.running.stop()


def _start(model: Path, mmproj: Path) -> Served:
    assert LFMSERVE is not None
    return Served(Running([LFMSERVE, "-m", str(model), "--mmproj", str(mmproj), "-c", "2048", "-np", "2", "-t", "1"]))


@pytest.fixture(scope="module")
def servers(vl_gguf: Path, mmproj_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Served]]:
    """``both``: vision and audio encoders; ``vision``: a projector without audio. Started side by side."""
    vision_only = write_mmproj_gguf(tmp_path_factory.mktemp("mmproj") / "vision.gguf", TinyProjector(kind="vision"))
    started = {"both": _start(vl_gguf, mmproj_gguf), "vision": _start(vl_gguf, vision_only)}
    try:
        for served in started.values():
            wait_healthy(served.url, served.process)
        yield started
    finally:
        for served in started.values():
            served.stop()


# -- broken media: a 400 each, and the server lives on ----------------------------------------------

#: (case, server, the content part (made when the test runs), the error's message)
BROKEN: list[tuple[str, str, Callable[[], dict[str, Any]], str]] = [
    (
        "truncated jpeg",
        "both",
        lambda: _image_part(_jpeg()[:300], "image/jpeg"),
        f"{FAILED}: the image cannot be decoded (Truncated File Read)",
    ),
    # Pillow refuses a 0x0 header while identifying the file: a PNG signature with a header it cannot take.
    ("0x0 png", "both", lambda: _image_part(_png_by_hand(0, 0)), f"{FAILED}: the image's header is invalid"),
    ("30000x30000 png", "both", lambda: _image_part(_bomb()), "image larger than 50 megapixels (by its header)"),
    ("text labelled png", "both", lambda: _image_part(b"hello"), NOT_AN_IMAGE),
    ("ico", "both", lambda: _image_part(_ico(), "image/x-icon"), NOT_AN_IMAGE),
    ("random bytes as an image", "both", lambda: _image_part(np.random.default_rng(0).bytes(4096)), NOT_AN_IMAGE),
    ("empty wav", "both", lambda: _audio_part(b""), "Invalid base64 value"),  # "" is what base64 makes of 0 bytes
    ("wav of 0 samples", "both", lambda: _audio_part(_wav_header(0)), f"{FAILED}: the audio has no samples"),
    # libsndfile counts the samples that are there, not the ones the header declares: none.
    (
        "wav declaring 10 h",
        "both",
        lambda: _audio_part(_wav_header(10 * 3600 * 16000 * 2)),
        f"{FAILED}: the audio has no samples",
    ),
    (
        "wav of 10 h",
        "both",
        lambda: _audio_part(_ten_hours_at_1_hz()),
        f"audio of 36000.0 s is longer than the {MAX_AUDIO_S} s this model's projector takes",
    ),
    (
        "random bytes as mp3",
        "both",
        lambda: _audio_part(np.random.default_rng(0).bytes(4096), "mp3"),
        f"{FAILED}: the audio cannot be decoded (Format not recognised)",
    ),
    (
        "mpeg frame sync then garbage",  # libsndfile's text for an MPEG stream its decoder cannot open
        "both",
        lambda: _audio_part(b"\xff\xfb\x90\x64" + np.random.default_rng(0).bytes(4096), "mp3"),
        f"{FAILED}: the audio cannot be decoded (no audio frames found)",
    ),
    (
        "audio not base64",
        "both",
        lambda: {"type": "input_audio", "input_audio": {"data": "@@ not base64 @@", "format": "wav"}},
        "Invalid base64 value",
    ),
    ("image not base64", "both", lambda: _url_part("data:image/png;base64,@@@@"), "Invalid base64 value"),
    (
        "data uri of text",
        "both",
        lambda: _url_part("data:text/plain;base64,aGVsbG8="),
        "Invalid uri format: data:text/plain;base64",
    ),
    ("data uri not base64", "both", lambda: _url_part("data:image/png,hello"), "uri must be base64 encoded"),
    (
        "file url",
        "both",
        lambda: _url_part("file://cat.png"),
        "file:// URLs are not allowed unless --media-path is specified",
    ),
    (
        "loopback url",  # refused before any connection (nothing listens on port 9 anyway)
        "both",
        lambda: _url_part("http://127.0.0.1:9/cat.png"),
        "media URL host 127.0.0.1 resolves to 127.0.0.1, a loopback, private or link-local address; "
        "this server does not fetch from its own network (--media-fetch-private allows it)",
    ),
    ("audio part to a vision-only projector", "vision", lambda: _audio_part(_wav(0.5)), NO_AUDIO),
    (
        "wav bytes in an image part to a vision-only projector",
        "vision",
        lambda: _image_part(_wav(0.5), "image/png"),
        NO_AUDIO,
    ),
]


@pytest.mark.parametrize(("server", "part", "message"), [case[1:] for case in BROKEN], ids=[case[0] for case in BROKEN])
def test_broken_media_is_a_400_naming_the_part_and_the_server_lives_on(
    servers: dict[str, Served], server: str, part: Callable[[], dict[str, Any]], message: str
) -> None:
    served = servers[server]
    response = served.post(_chat(part()))
    assert response.status_code == 400
    assert response.json() == {
        "error": {"code": 400, "message": message, "type": "invalid_request_error", "param": PART}
    }
    served.assert_alive()


def test_a_10_hour_wav_is_refused_from_its_header_without_allocating_its_samples(servers: dict[str, Served]) -> None:
    served = servers["both"]
    before = served.peak_rss_bytes()
    for data in (_wav_header(10 * 3600 * 16000 * 2), _ten_hours_at_1_hz()):
        assert served.post(_chat(_audio_part(data))).status_code == 400
    assert served.peak_rss_bytes() - before < 256 * 2**20  # 10 h of float32 at 16 kHz would be 2.3 GB
    served.assert_alive()


def test_an_unknown_content_part_type_is_a_400_naming_the_part(servers: dict[str, Served]) -> None:
    served = servers["both"]
    response = served.post(_chat({"type": "file", "file": {"file_data": "aGVsbG8="}}))
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", "messages.0.content.1")
    assert error["message"].startswith(
        "Invalid value for 'messages.0.content.1': Input tag 'file' found using 'type' does not match any of the "
        "expected tags: 'text', 'image_url', 'input_audio'"
    )
    served.assert_alive()


# -- what is accepted by design ---------------------------------------------------------------------

#: (case, content part): each answered 200
ACCEPTED: list[tuple[str, Callable[[], dict[str, Any]]]] = [
    ("1x1 png", lambda: _image_part(_png(1, 1))),  # mtmd scales it up (decode.py takes any size from 1x1 up)
    ("input_audio format xyz", lambda: _audio_part(_wav(0.5), "xyz")),  # the bytes say what they are
    ("png in an input_audio part", lambda: _audio_part(_png(64, 64))),  # as llama-server: the bytes decide
    ("wav in an image_url part", lambda: _image_part(_wav(0.5), "image/png")),
]


@pytest.mark.parametrize("part", [case[1] for case in ACCEPTED], ids=[case[0] for case in ACCEPTED])
def test_odd_but_readable_media_are_answered(servers: dict[str, Served], part: Callable[[], dict[str, Any]]) -> None:
    response = servers["both"].post(_chat(part(), ignore_eos=True))
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 4


# -- nobody else is disturbed -----------------------------------------------------------------------


@dataclass
class StreamResult:
    chunks: list[dict[str, Any]]
    ended_s: float  # when [DONE] came, on the loop's clock


async def _stream(client: httpx.AsyncClient, body: dict[str, Any], started: asyncio.Event) -> StreamResult:
    chunks: list[dict[str, Any]] = []
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    async with client.stream("POST", CHAT, json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line == "data: [DONE]":
                return StreamResult(chunks, asyncio.get_running_loop().time())
            if line.startswith("data: "):
                chunks.append(json.loads(line[6:]))
                started.set()
    raise AssertionError("the stream ended without [DONE]")


def test_bad_requests_during_two_good_streams_disturb_neither(servers: dict[str, Served]) -> None:
    served = servers["both"]
    n_tokens = 256  # about 0.2 s of decoding: the bad requests are answered long before it ends

    async def main() -> tuple[list[StreamResult], list[httpx.Response], float]:
        async with httpx.AsyncClient(base_url=served.url, timeout=60) as client:
            events = [asyncio.Event(), asyncio.Event()]
            parts = (_image_part(_png(64, 64, seed=3)), _audio_part(_wav(0.5)))
            goods = [
                asyncio.create_task(_stream(client, _chat(part, max_tokens=n_tokens, ignore_eos=True), event))
                for part, event in zip(parts, events, strict=True)
            ]
            await asyncio.gather(*(event.wait() for event in events))  # both are generating now
            bad = [
                await client.post(CHAT, json=_chat(part))
                for part in (_image_part(_bomb()), _audio_part(b"\xff\xfb" * 99), _image_part(b"hello"))
            ]
            answered_s = asyncio.get_running_loop().time()
            return list(await asyncio.gather(*goods)), bad, answered_s

    streams, bad, answered_s = asyncio.run(main())
    assert [response.status_code for response in bad] == [400, 400, 400]
    for stream in streams:
        assert stream.ended_s > answered_s  # the bad requests really came while both streams were running
        *_, last_choice, usage = stream.chunks
        assert last_choice["choices"][0]["finish_reason"] == "length"
        assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == n_tokens
    served.assert_alive()


def test_after_all_the_broken_media_good_ones_are_answered(servers: dict[str, Served]) -> None:
    for served in servers.values():
        served.assert_alive()
    response = servers["both"].post(_chat(_image_part(_png(64, 64, seed=7)), _audio_part(_wav(0.5)), ignore_eos=True))
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["choices"][0]["message"]["role"] == "assistant" and answer["usage"]["completion_tokens"] == 4
    response = servers["vision"].post(_chat(_image_part(_png(64, 64, seed=7)), ignore_eos=True))
    assert response.status_code == 200, response.text
    logs = servers["both"].log + servers["vision"].log
    assert "Traceback" not in logs and " ERROR " not in logs
