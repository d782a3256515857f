"""How a request's media items reach their decoders: which bytes go to the video reader, and how many videos
are decoded at once."""

from __future__ import annotations

import asyncio
import base64
import threading
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest

from lfmserve.chat.media import MediaReader, MediaSource, reads_as_video
from lfmserve.llama.mtmd import Projector
from lfmserve.media import video as video_module
from lfmserve.media.sources import MediaPolicy
from lfmserve.media.video import Video, VideoOptions
from lfmserve.testing import image_bytes, wav_bytes

MP4 = b"\x00\x00\x00\x20ftypisom" + bytes(64)


@pytest.mark.parametrize(
    ("kind", "data", "expected"),
    [
        ("video", MP4, True),
        ("image", MP4, True),  # decided by the bytes, as llama-server does
        (None, MP4, True),
        ("video", b"not a video", True),  # refused by the video reader, naming a container
        ("image", b"#EXTM3U\nhttp://127.0.0.1:1/x.ts\n", True),  # refused as a playlist, not as "no image"
        ("image", b"not an image", False),
        ("video", "png", False),
        ("video", "wav", False),
    ],
    ids=["mp4", "mp4 as image", "mp4 untyped", "junk as video", "playlist as image", "junk as image", "png", "wav"],
)
def test_what_goes_to_the_video_reader(kind: str | None, data: bytes | str, expected: bool) -> None:
    if data == "png":
        data = image_bytes(8, 8, seed=1, format="PNG")
    elif data == "wav":
        data = wav_bytes(0.5)
    assert isinstance(data, bytes)
    assert reads_as_video(kind, data) is expected  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [1, 2])
def test_no_more_videos_decode_at_once_than_the_limit(monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    active, most, entered = 0, 0, threading.Semaphore(0)
    lock, gate = threading.Lock(), threading.Event()

    def decode_video(data: bytes, options: VideoOptions, *, param: str) -> Video:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        entered.release()
        assert gate.wait(60)
        with lock:
            active -= 1
        return Video(np.zeros((1, 2, 2, 3), np.uint8), ("Video:", 0), 4.0)

    monkeypatch.setattr(video_module, "decode_video", decode_video)
    monkeypatch.setattr(video_module, "ffmpeg_tools", lambda options: ("ffmpeg", "ffprobe"))
    projector = cast(Projector, SimpleNamespace(vision=True, audio=False, video=True))
    reader = MediaReader(projector, MediaPolicy(), video_decodes=limit)
    source: MediaSource = ("video", base64.b64encode(MP4).decode(), "messages.0.content.0")

    async def three_requests() -> None:
        reads = [asyncio.ensure_future(reader.read([source])) for _ in range(3)]
        for _ in range(limit):
            assert await asyncio.to_thread(entered.acquire, True, 60)
        for _ in range(100):  # every read's way to the limit has no wait: they all stand at it now
            await asyncio.sleep(0)
        assert (active, most) == (limit, limit)
        gate.set()
        assert [len(media) for media in await asyncio.gather(*reads)] == [1, 1, 1]

    asyncio.run(three_requests())
    assert most == limit
