"""Video parts over HTTP, as llama-server at the pin reads them: ``input_video`` (and its alias ``video_url``) becomes
``Video:``, then each frame ffmpeg takes at ``--video-fps`` as an image, with a timestamp after the first frame of each
``--video-timestamp-interval``; a 400 that says so where ffmpeg is missing.

The prompt token counts are llama-server's for the same tiny model, projector and clip (bench/video_parity.py
compares them request by request): 2 s of 320x240 at 4 fps is 8 frames of 80 tokens, each between
``<|image_start|>`` and ``<|image_end|>``, plus the texts ``Video:`` and ``[0m0.00s]``.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.chat import media as chat_media
from lfmserve.settings import Settings
from lfmserve.testing import TinyProjector, image_bytes, video_bytes, write_mmproj_gguf
from tests.canary import Canary
from tests.conftest import ServerThread, vl_settings

needs_ffmpeg = pytest.mark.usefixtures("ffmpeg")
QUESTION = {"type": "text", "text": "Describe this."}
PART = "messages.0.content.0"
#: The question alone, and with 2 s of 320x240: what llama-server answers for each (bench/video_parity.py).
TEXT_ONLY = 28
WITH_CLIP = 699
FRAME = 80 + 2  # 10 x 8 patches of 32 px, between <|image_start|> and <|image_end|>


def _data_uri(data: bytes, mime: str = "video/mp4") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def _input_video(data: bytes) -> dict[str, Any]:
    return {"type": "input_video", "input_video": {"data": _data_uri(data)}}


def _chat(server: ServerThread, *parts: dict[str, Any]) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": [*parts, QUESTION]}], "max_tokens": 2, "temperature": 0}
    return httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120)


def _prompt_tokens(server: ServerThread, *parts: dict[str, Any]) -> int:
    response = _chat(server, *parts)
    assert response.status_code == 200, response.text
    return int(response.json()["usage"]["prompt_tokens"])


def _error(response: httpx.Response, message: str, param: str = PART) -> None:
    assert response.status_code == 400
    assert response.json() == {
        "error": {"code": 400, "message": message, "type": "invalid_request_error", "param": param}
    }


@pytest.fixture(scope="module")
def vl_server(server_factory: Callable[..., ServerThread], vl_gguf: Path, mmproj_gguf: Path) -> ServerThread:
    return server_factory(vl_settings(vl_gguf, mmproj_gguf, ctx_size=8192))


@pytest.fixture(scope="module")
def clip(ffmpeg: tuple[str, str]) -> bytes:
    data = video_bytes(2.0, 320, 240)
    assert data is not None
    return data


def test_props_report_video_with_a_vision_projector(vl_server: ServerThread) -> None:
    props = httpx.get(vl_server.url + "/props").json()
    assert props["modalities"] == {"vision": True, "audio": True, "video": True}


@needs_ffmpeg
def test_a_video_is_video_then_each_frame_with_a_timestamp_after_the_first(
    vl_server: ServerThread, clip: bytes
) -> None:
    def n_tokens(text: str) -> int:
        return len(httpx.post(vl_server.url + "/tokenize", json={"content": text}).json()["tokens"])

    assert _prompt_tokens(vl_server) == TEXT_ONLY
    assert _prompt_tokens(vl_server, _input_video(clip)) == WITH_CLIP
    assert WITH_CLIP == TEXT_ONLY + n_tokens("Video:") + 8 * FRAME + n_tokens("[0m0.00s]")


@needs_ffmpeg
def test_the_video_url_alias_and_a_video_in_an_image_part_read_the_same(vl_server: ServerThread, clip: bytes) -> None:
    raw = base64.b64encode(clip).decode()
    assert _prompt_tokens(vl_server, {"type": "video_url", "video_url": {"url": raw}}) == WITH_CLIP
    assert _prompt_tokens(vl_server, {"type": "input_video", "input_video": {"url": _data_uri(clip)}}) == WITH_CLIP
    # llama-server decides by the bytes, whatever the part: an MP4 in image_url is a video, a PNG in a video part
    # an image (256x256: 64 tokens and its two wrappers).
    assert _prompt_tokens(vl_server, {"type": "image_url", "image_url": {"url": _data_uri(clip)}}) == WITH_CLIP
    png = {"type": "input_video", "input_video": {"data": _data_uri(image_bytes(256, 256, seed=1, format="PNG"))}}
    assert _prompt_tokens(vl_server, png) == TEXT_ONLY + 66


@needs_ffmpeg
def test_bytes_that_are_no_video_are_a_400_and_the_server_answers_on(vl_server: ServerThread, clip: bytes) -> None:
    no_stream = "Failed to load image or audio file: ffprobe finds no video stream it can read in the bytes"
    no_container = (
        "Failed to load image or audio file: not a video container read here (MP4/MOV, Matroska/WebM, AVI, FLV, "
        "ASF, MPEG-PS, MPEG-TS, Y4M)"
    )
    _error(_chat(vl_server, {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}), no_container)
    truncated = {"type": "input_video", "input_video": {"data": _data_uri(clip[:2000])}}
    _error(_chat(vl_server, truncated), no_stream)
    _error(_chat(vl_server, {"type": "input_video", "input_video": {}}), "Invalid base64 value")
    assert _prompt_tokens(vl_server, _input_video(clip)) == WITH_CLIP


@needs_ffmpeg
def test_the_video_flags_set_the_rate_and_the_timestamps(
    server_factory: Callable[..., ServerThread], vl_gguf: Path, mmproj_gguf: Path, clip: bytes
) -> None:
    # 3.3 fps: 7 frames of 2 s; timestamps at 0, 909 and 1515 ms (the first frames at or past 0, 700 and 1400).
    settings = vl_settings(vl_gguf, mmproj_gguf, ctx_size=8192, video_fps=3.3, video_timestamp_interval=700)
    server = server_factory(settings)
    assert _prompt_tokens(server, _input_video(clip)) == 635  # llama-server's, with the same flags


def test_without_ffmpeg_a_video_is_a_400_that_says_so(
    server_factory: Callable[..., ServerThread], vl_gguf: Path, mmproj_gguf: Path, tmp_path: Path
) -> None:
    server = server_factory(vl_settings(vl_gguf, mmproj_gguf, ctx_size=8192, video_ffmpeg_dir=str(tmp_path)))
    header = b"\x00\x00\x00\x20ftypisom" + bytes(64)
    _error(
        _chat(server, _input_video(header)),
        f"video input needs ffmpeg and ffprobe, which this server cannot find in --video-ffmpeg-dir {tmp_path} "
        "(install ffmpeg, or point --video-ffmpeg-dir at the folder that holds both)",
    )
    picture = {"type": "image_url", "image_url": {"url": _data_uri(image_bytes(256, 256, seed=1), "image/jpeg")}}
    assert _prompt_tokens(server, picture) == TEXT_ONLY + 66


def test_a_projector_without_vision_reads_no_video(
    server_factory: Callable[..., ServerThread], vl_gguf: Path, tmp_path: Path
) -> None:
    audio_only = write_mmproj_gguf(tmp_path / "audio.gguf", TinyProjector(kind="audio"))
    server = server_factory(Settings.of(model=str(vl_gguf), mmproj=str(audio_only), ctx_size=2048, threads=1))
    assert httpx.get(server.url + "/props").json()["modalities"] == {"vision": False, "audio": True, "video": False}
    _error(
        _chat(server, _input_video(b"\x00\x00\x00\x20ftypisom")),
        "video input is not supported - hint: if this is unexpected, you may need to provide the mmproj",
    )


def test_the_video_flags_and_llama_servers_variables_set_the_media_settings() -> None:
    defaults = Settings.from_argv([], environ={}).media
    assert (defaults.video_fps, defaults.video_timestamp_interval, defaults.video_ffmpeg_dir) == (4.0, 5000, None)
    flags = ["--video-fps", "2.5", "--video-timestamp-interval", "1000", "--video-ffmpeg-dir", "/opt/ffmpeg/bin"]
    media = Settings.from_argv(flags, environ={}).media
    assert (media.video_fps, media.video_timestamp_interval, media.video_ffmpeg_dir) == (2.5, 1000, "/opt/ffmpeg/bin")
    variables = {
        "LLAMA_ARG_VIDEO_FPS": "0",
        "LLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL": "0",
        "LLAMA_ARG_VIDEO_FFMPEG_DIR": "/x",
    }
    media = Settings.from_argv([], environ=variables).media
    assert (media.video_fps, media.video_timestamp_interval, media.video_ffmpeg_dir) == (0.0, 0, "/x")


@needs_ffmpeg
def test_a_requests_videos_together_are_bounded_too(
    vl_server: ServerThread, clip: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chat_media, "MAX_FRAME_BYTES", 3 * 2**20)  # one clip is 8 x 320 x 240 x 3 = 1.8 MB
    assert _prompt_tokens(vl_server, _input_video(clip)) == WITH_CLIP
    response = _chat(vl_server, _input_video(clip), _input_video(clip))
    _error(response, "the request's videos give more than 3 MiB of frames", param="messages.0.content.1")


# -- playlists: nothing a client names is ever opened ----------------------------------------------------------


def _playlists(canary: Canary) -> dict[str, bytes]:
    """An HLS playlist, a concat list and a DASH manifest that each make plain ffmpeg reach the canary (the concat
    list through a playlist of that name in ffmpeg's folder: its ``safe`` mode refuses a URL, not a relative file)."""
    hls = f"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\n{canary.url('hls.ts')}\n#EXT-X-ENDLIST\n"
    dash = (
        '<?xml version="1.0"?>\n<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" '
        'profiles="urn:mpeg:dash:profile:isoff-on-demand:2011" type="static" mediaPresentationDuration="PT1S" '
        'minBufferTime="PT1S"><Period><AdaptationSet mimeType="video/mp4"><Representation id="1" bandwidth="1000">'
        f"<BaseURL>{canary.url('dash.mp4')}</BaseURL></Representation></AdaptationSet></Period></MPD>\n"
    )
    return {
        "an HLS playlist": hls.encode(),
        "a concat list": b"ffconcat version 1.0\nfile 'nested.m3u8'\n",
        "a DASH manifest": dash.encode(),
    }


PLAYLIST_PARTS: dict[str, Callable[[bytes], dict[str, Any]]] = {
    "input_video": _input_video,
    "video_url": lambda data: {"type": "video_url", "video_url": {"url": _data_uri(data)}},
    "image_url": lambda data: {"type": "image_url", "image_url": {"url": _data_uri(data, "image/png")}},
}


@pytest.fixture
def canary() -> Iterator[Canary]:
    with Canary() as listener:
        yield listener


@pytest.mark.parametrize("part", list(PLAYLIST_PARTS))
@pytest.mark.parametrize("kind", ["an HLS playlist", "a concat list", "a DASH manifest"])
def test_a_playlist_naming_a_listener_is_a_400_naming_the_field_and_nothing_connects(
    vl_server: ServerThread, canary: Canary, ffmpeg: tuple[str, str], part: str, kind: str
) -> None:
    data = _playlists(canary)[kind]
    _error(
        _chat(vl_server, PLAYLIST_PARTS[part](data)),
        f"Failed to load image or audio file: the video is {kind}, which names other files or URLs; playlists, "
        "manifests and lists are not read (send the video file's own bytes)",
    )
    assert canary.settle() == 0


@pytest.mark.parametrize("kind", ["an HLS playlist", "a concat list", "a DASH manifest"])
def test_the_same_playlist_makes_plain_ffmpeg_connect(
    canary: Canary, ffmpeg: tuple[str, str], tmp_path: Path, kind: str
) -> None:
    """What the test above guards against: the bytes given to ffmpeg as this server gave them before (the mtmd
    helper's command, every demuxer and protocol allowed) reach the listener."""
    playlists = _playlists(canary)
    (tmp_path / "nested.m3u8").write_bytes(playlists["an HLS playlist"])
    command = [ffmpeg[0], "-nostdin", "-v", "quiet", "-read_ahead_limit", "-1", "-i", "cache:pipe:0"]
    command += ["-f", "rawvideo", "-pix_fmt", "rgb24", "-frames:v", "1", "pipe:1"]
    subprocess.run(command, input=playlists[kind], cwd=tmp_path, capture_output=True, timeout=60, check=False)
    assert canary.settle() == 1
