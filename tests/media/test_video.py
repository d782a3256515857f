"""Video bytes to frames and the texts between them: llama-server's mtmd helper's, byte for byte, or a 400."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import llama_cpp.mtmd_cpp as mtmd
import numpy as np
import pytest

from lfmserve.errors import InvalidRequest
from lfmserve.llama.mtmd import Projector
from lfmserve.media import video as video_module
from lfmserve.media.video import (
    VideoOptions,
    container_of,
    decode_video,
    ffmpeg_tools,
    is_video,
    manifest_of,
    video_layout,
)
from lfmserve.testing import video_bytes

needs_ffmpeg = pytest.mark.usefixtures("ffmpeg")


# -- the layout: mtmd-helper's read_next in float32 ----------------------------------------------------


def test_two_seconds_at_4_fps_is_video_then_8_frames_with_one_timestamp_after_the_first() -> None:
    assert video_layout(8, 4.0, 5000) == ("Video:", 0, "[0m0.00s]", 1, 2, 3, 4, 5, 6, 7)


def test_a_timestamp_follows_the_first_frame_at_or_past_each_interval() -> None:
    assert video_layout(12, 10.0, 250) == (
        *("Video:", 0, "[0m0.00s]", 1, 2, 3, "[0m0.30s]", 4, 5, "[0m0.50s]"),
        *(6, 7, 8, "[0m0.80s]", 9, 10, "[0m1.00s]", 11),
    )


def test_timestamps_count_minutes_and_round_their_seconds_to_hundredths() -> None:
    layout = video_layout(301, 4.0, 5000)
    stamps = [item for item in layout if isinstance(item, str)][1:]
    assert stamps[:3] == ["[0m0.00s]", "[0m5.00s]", "[0m10.00s]"]
    assert stamps[11:14] == ["[0m55.00s]", "[1m0.00s]", "[1m5.00s]"]
    assert len(stamps) == 16 and layout[layout.index("[1m0.00s]") - 1] == 240
    # 3.3 fps: frame 3 is 909.09... ms in, after the 700 ms mark; frame 5 (1515.15 ms) after 1400.
    assert [item for item in video_layout(6, 3.3, 700) if isinstance(item, str)] == [
        "Video:",
        "[0m0.00s]",
        "[0m0.91s]",
        "[0m1.52s]",
    ]


def test_an_interval_of_0_or_less_writes_no_timestamp_and_it_wraps_as_an_int32() -> None:
    assert video_layout(3, 4.0, 0) == ("Video:", 0, 1, 2)
    assert video_layout(3, 4.0, -5) == ("Video:", 0, 1, 2)
    assert video_layout(3, 4.0, 2**32) == ("Video:", 0, 1, 2)  # 0 as mtmd-helper's int32_t
    assert video_layout(0, 4.0, 5000) == ("Video:",)


# -- what is tried as a video ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "demuxer"),
    [
        (b"\x00\x00\x00\x20ftypisom", "mov"),
        (b"\x1a\x45\xdf\xa3\x01", "matroska"),
        (b"RIFF\x00\x00\x00\x00AVI LIST", "avi"),
        (b"FLV\x01\x05", "flv"),
        (b"\x30\x26\xb2\x75\x8e\x66\xcf\x11\xa6", "asf"),
        (b"\x00\x00\x01\xba\x44", "mpeg"),
        (b"YUV4MPEG2 W2 H2", "yuv4mpegpipe"),
        (b"\x47" + b"\x00" * 187 + b"\x47\x00", "mpegts"),
    ],
)
def test_container_signatures_are_videos_each_read_by_its_own_demuxer(head: bytes, demuxer: str) -> None:
    assert is_video(head)
    assert container_of(head) == demuxer


@pytest.mark.parametrize(
    "head", [b"", b"RIFF\x00\x00\x00\x00WAVEfmt ", b"\x89PNG\r\n\x1a\n", b"GIF89a", b"hello", b"\x47" * 100]
)
def test_other_bytes_are_not(head: bytes) -> None:
    assert not is_video(head)


#: Texts that name other files or URLs, as ffmpeg's hls, concat, dash and sdp demuxers read them.
MANIFESTS = [
    (b"#EXTM3U\n#EXTINF:1,\nhttp://127.0.0.1:1/x.ts\n", "an HLS playlist"),
    (b"\xef\xbb\xbf\n#EXTM3U\n", "an HLS playlist"),
    (b"ffconcat version 1.0\nfile 'a.mp4'\n", "a concat list"),
    (b"# two clips\n\nfile 'a.mp4'\nfile 'b.mp4'\n", "a concat list"),
    (b'<?xml version="1.0"?>\n<!-- made by hand -->\n<MPD xmlns="urn:mpeg:dash:schema:mpd:2011">', "a DASH manifest"),
    (b"<MPD>", "a DASH manifest"),
    (b"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\n", "an SDP description"),
]


@pytest.mark.parametrize(("data", "kind"), MANIFESTS)
def test_playlists_and_lists_are_known_by_their_first_bytes(data: bytes, kind: str) -> None:
    assert manifest_of(data) == kind
    assert container_of(data) is None


@pytest.mark.parametrize("data", [b"", b"hello", b"#EXTINF:1,\n", b"<html>", b"\x00\x00\x00\x20ftypisom", b"v=1\n"])
def test_other_bytes_are_no_playlist(data: bytes) -> None:
    assert manifest_of(data) is None


@pytest.fixture
def tracing_tools(tmp_path: Path) -> Path:
    """An ffmpeg and an ffprobe that only write down that they ran."""
    for name in ("ffmpeg", "ffprobe"):
        tool = tmp_path / name
        tool.write_text(f"#!/bin/sh\ntouch '{tmp_path}/{name}-ran'\n")
        tool.chmod(0o755)
    return tmp_path


@pytest.mark.parametrize(("data", "kind"), MANIFESTS)
def test_a_playlist_is_refused_before_ffmpeg_or_ffprobe_runs(tracing_tools: Path, data: bytes, kind: str) -> None:
    assert _refused(data, VideoOptions(ffmpeg_dir=str(tracing_tools))) == (
        f"Failed to load image or audio file: the video is {kind}, which names other files or URLs; playlists, "
        "manifests and lists are not read (send the video file's own bytes)"
    )
    assert sorted(path.name for path in tracing_tools.iterdir()) == ["ffmpeg", "ffprobe"]


def test_bytes_of_no_container_read_here_are_refused_before_ffmpeg_runs(tracing_tools: Path) -> None:
    for data in (b"GIF89a not a video", b"file:///etc/passwd", b"\x47" * 100):
        assert _refused(data, VideoOptions(ffmpeg_dir=str(tracing_tools))) == (
            "Failed to load image or audio file: not a video container read here (MP4/MOV, Matroska/WebM, AVI, FLV, "
            "ASF, MPEG-PS, MPEG-TS, Y4M)"
        )
    assert sorted(path.name for path in tracing_tools.iterdir()) == ["ffmpeg", "ffprobe"]


def test_ffprobe_and_ffmpeg_are_told_the_demuxer_and_may_open_nothing_but_the_pipe(
    tracing_tools: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands: list[list[str]] = []

    def run(command: list[str], **_: object) -> subprocess.CompletedProcess[bytes]:
        commands.append(command)
        probe = b"width=64\nheight=48\nr_frame_rate=4/1\n"
        output = probe if Path(command[0]).name == "ffprobe" else bytes(64 * 48 * 3)
        return subprocess.CompletedProcess(command, 0, output, b"")

    monkeypatch.setattr(video_module.subprocess, "run", run)
    video = decode_video(b"\x1a\x45\xdf\xa3" + bytes(100), VideoOptions(ffmpeg_dir=str(tracing_tools)), param="p")
    assert video.frames.shape == (1, 48, 64, 3)
    assert len(commands) == 2
    for command in commands:
        source = command.index("-i") if "-i" in command else len(command) - 1
        options = command[:source]
        at = options.index("-protocol_whitelist")
        assert options[at : at + 6] == [
            *("-protocol_whitelist", "pipe,cache", "-format_whitelist", "matroska", "-f", "matroska")
        ]


#: (file extension, codec) -> the demuxer named for it: every container read here that ffmpeg writes by default.
CONTAINERS = {
    ("mp4", "mpeg4"): "mov",
    ("mov", "mpeg4"): "mov",
    ("mkv", "mpeg4"): "matroska",
    ("avi", "mpeg4"): "avi",
    ("flv", "flv1"): "flv",
    ("wmv", "wmv2"): "asf",
    ("mpg", "mpeg2video"): "mpeg",
    ("ts", "mpeg2video"): "mpegts",
}


@needs_ffmpeg
@pytest.mark.parametrize("written", list(CONTAINERS), ids=[written[0] for written in CONTAINERS])
def test_every_container_read_here_decodes_with_its_demuxer_named(written: tuple[str, str]) -> None:
    data = video_bytes(1.0, 64, 48, container=written[0], codec=written[1])
    assert data is not None
    assert container_of(data) == CONTAINERS[written]
    assert decode_video(data, VideoOptions(), param="p").frames.shape == (4, 48, 64, 3)


# -- ffmpeg and ffprobe ------------------------------------------------------------------------------------


def _refused(data: bytes, options: VideoOptions) -> str:
    with pytest.raises(InvalidRequest) as info:
        decode_video(data, options, param="messages.0.content.1")
    assert info.value.param == "messages.0.content.1"
    return info.value.message


def test_without_ffmpeg_in_the_folder_named_a_video_is_a_400_that_says_so(tmp_path: Path) -> None:
    options = VideoOptions(ffmpeg_dir=str(tmp_path))
    assert ffmpeg_tools(options) is None
    assert _refused(b"\x00\x00\x00\x20ftypisom", options) == (
        f"video input needs ffmpeg and ffprobe, which this server cannot find in --video-ffmpeg-dir {tmp_path} "
        "(install ffmpeg, or point --video-ffmpeg-dir at the folder that holds both)"
    )


def test_a_folder_with_only_ffmpeg_is_not_enough(tmp_path: Path) -> None:
    tool = tmp_path / "ffmpeg"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert ffmpeg_tools(VideoOptions(ffmpeg_dir=str(tmp_path))) is None
    (tmp_path / "ffprobe").write_text("#!/bin/sh\n")  # not executable
    assert ffmpeg_tools(VideoOptions(ffmpeg_dir=str(tmp_path))) is None
    (tmp_path / "ffprobe").chmod(0o755)
    assert ffmpeg_tools(VideoOptions(ffmpeg_dir=str(tmp_path))) == (str(tool), str(tmp_path / "ffprobe"))


@needs_ffmpeg
def test_the_tools_are_found_in_path_or_in_the_folder_named() -> None:
    ffmpeg, ffprobe = shutil.which("ffmpeg"), shutil.which("ffprobe")
    assert ffmpeg_tools(VideoOptions()) == (ffmpeg, ffprobe)
    folder = os.path.dirname(ffmpeg or "")
    assert ffmpeg_tools(VideoOptions(ffmpeg_dir=folder)) == (os.path.join(folder, "ffmpeg"), ffprobe)


@needs_ffmpeg
@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "Failed to load image or audio file: the video is empty"),
        (
            b"\x00\x00\x00\x20ftypisom" + bytes(500),
            "Failed to load image or audio file: ffprobe finds no video stream it can read in the bytes",
        ),
        (
            b"\x1a\x45\xdf\xa3" + np.random.default_rng(0).bytes(4096),
            "Failed to load image or audio file: ffprobe finds no video stream it can read in the bytes",
        ),
        (
            np.random.default_rng(0).bytes(4096),
            "Failed to load image or audio file: not a video container read here (MP4/MOV, Matroska/WebM, AVI, "
            "FLV, ASF, MPEG-PS, MPEG-TS, Y4M)",
        ),
    ],
    ids=["empty", "mp4 header then zeros", "matroska header then noise", "random bytes"],
)
def test_bytes_that_are_no_video_are_a_400(data: bytes, message: str) -> None:
    assert _refused(data, VideoOptions()) == message


@needs_ffmpeg
def test_a_video_narrower_than_100_to_1_is_refused_from_ffprobe_s_answer() -> None:
    clip = video_bytes(0.5, 8, 1000, rate=4)
    assert clip is not None
    assert _refused(clip, VideoOptions()) == "video of 8x1000 pixels is narrower than 100:1 allows"


@needs_ffmpeg
def test_a_video_with_more_frames_than_the_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    clip = video_bytes(2.0, 64, 48)
    assert clip is not None
    monkeypatch.setattr(video_module, "MAX_FRAMES", 7)
    assert _refused(clip, VideoOptions()) == (
        "video gives more than 7 frames of 64x48 at 4 fps (send a shorter clip, or start the server with a lower "
        "--video-fps)"
    )
    monkeypatch.setattr(video_module, "MAX_FRAMES", 8)
    assert len(decode_video(clip, VideoOptions(), param="p").frames) == 8


@needs_ffmpeg
def test_the_frame_rate_is_the_flag_s_or_the_video_s_own() -> None:
    clip = video_bytes(2.0, 64, 48, rate=10)
    assert clip is not None
    at_4 = decode_video(clip, VideoOptions(), param="p")
    assert (at_4.frames.shape, at_4.fps) == ((8, 48, 64, 3), 4.0)
    native = decode_video(clip, VideoOptions(fps=0, timestamp_interval_ms=1000), param="p")
    assert (native.frames.shape, native.fps) == ((20, 48, 64, 3), 10.0)
    assert native.layout == ("Video:", 0, "[0m0.00s]", *range(1, 10), 10, "[0m1.00s]", *range(11, 20))


# -- the same frames and texts as llama-server's reader ------------------------------------------------------


def _mtmd_helper_items(projector: Projector, data: bytes, fps: float, interval_ms: int) -> list[tuple[str, str]]:
    """What llama-server's reader gives (``mtmd_helper_video_read_next`` until EOF): texts, and frames as
    ``WxH:<sha256 of the RGB bytes>``."""
    params = mtmd.mtmd_helper_video_init_params_default()
    params.fps_target, params.timestamp_interval_ms = fps, interval_ms
    buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    reader = mtmd.mtmd_helper_video_init_from_buf(projector.handle, buffer, len(data), params)
    assert reader
    items: list[tuple[str, str]] = []
    try:
        while True:
            bitmap, text = mtmd.mtmd_bitmap_p_ctypes(), ctypes.c_char_p()
            if mtmd.mtmd_helper_video_read_next(reader, ctypes.byref(bitmap), ctypes.byref(text)) != 0:
                return items
            if bitmap:
                pixels = ctypes.string_at(mtmd.mtmd_bitmap_get_data(bitmap), mtmd.mtmd_bitmap_get_n_bytes(bitmap))
                size = f"{mtmd.mtmd_bitmap_get_nx(bitmap)}x{mtmd.mtmd_bitmap_get_ny(bitmap)}"
                items.append(("frame", f"{size}:{hashlib.sha256(pixels).hexdigest()}"))
                mtmd.mtmd_bitmap_free(bitmap)
            else:
                items.append(("text", (text.value or b"").decode()))
    finally:
        mtmd.mtmd_helper_video_free(reader)


def _our_items(data: bytes, fps: float, interval_ms: int) -> list[tuple[str, str]]:
    video = decode_video(data, VideoOptions(fps=fps, timestamp_interval_ms=interval_ms), param="p")
    items = []
    for item in video.layout:
        if isinstance(item, str):
            items.append(("text", item))
        else:
            frame = video.frames[item]
            items.append(("frame", f"{frame.shape[1]}x{frame.shape[0]}:{hashlib.sha256(frame.tobytes()).hexdigest()}"))
    return items


#: (container, seconds, rate) -> frames at 4 fps (the default), at the clip's own rate, at 3.3 fps.
CLIPS = {("mp4", 2.0, 10): (8, 20, 7), ("mkv", 1.5, 25): (6, 38, 5), ("avi", 1.0, 12): (4, 12, 3)}


@needs_ffmpeg
@pytest.mark.parametrize("clip", list(CLIPS), ids=[clip[0] for clip in CLIPS])
@pytest.mark.parametrize(("case", "fps", "interval_ms"), [(0, 4.0, 5000), (1, 0.0, 400), (2, 3.3, 700)])
def test_frames_and_texts_are_mtmd_helpers_byte_for_byte(
    projector: Projector, clip: tuple[str, float, int], case: int, fps: float, interval_ms: int
) -> None:
    container, seconds, rate = clip
    data = video_bytes(seconds, 96, 64, rate=rate, container=container)
    assert data is not None
    ours = _our_items(data, fps, interval_ms)
    assert ours == _mtmd_helper_items(projector, data, fps, interval_ms)
    assert sum(kind == "frame" for kind, _ in ours) == CLIPS[clip][case]


@needs_ffmpeg
def test_an_mp4_indexed_at_its_end_is_probed_again_seekably_where_llama_server_gives_up(projector: Projector) -> None:
    data = video_bytes(7.0, 160, 120, rate=8)
    assert data is not None and data.find(b"moov") > data.find(b"mdat") > 0 and len(data) > 64_000
    params = mtmd.mtmd_helper_video_init_params_default()
    buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    assert not mtmd.mtmd_helper_video_init_from_buf(projector.handle, buffer, len(data), params)  # ffprobe: 0x0
    video = decode_video(data, VideoOptions(), param="p")
    assert video.frames.shape == (28, 120, 160, 3)
    assert video.layout == ("Video:", 0, "[0m0.00s]", *range(1, 21), "[0m5.00s]", *range(21, 28))
