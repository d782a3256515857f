"""Video bytes to frames and the text between them, as llama-server's mtmd helper makes them, or a 400.

llama-server (``mtmd_helper_video`` in mtmd-helper.cpp) asks ffprobe for the first video stream's size and
frame rate, has ffmpeg decode the video to RGB frames at ``--video-fps`` (4; 0 or less: the video's own rate),
and puts ``Video:`` in the prompt, then each frame as an image, with a timestamp such as ``[0m5.00s]`` after
the frame that starts each ``--video-timestamp-interval`` (5000 ms; 0 or less: none). Each text is tokenized
on its own, like the text between two media markers. The same two commands run here, with the same
arguments and those below that bound what they may open, so the frames are llama-server's byte for byte; but
from Python, under a timeout, with the frames kept bounded, after the stream's size has been checked as an
image's would be, and with ffmpeg's automatic rotation off: llama-server reads a rotated video's frames at the
size ffprobe reported before rotation, which scrambles their pixels (the token count is the same either way). An
MP4 with its index at the end, which llama-server's probe cannot read from a pipe, is probed a second time,
seekably.

ffmpeg follows what a file names: a playlist (HLS, DASH), a concat list or an SDP description sent as a video
would make the server open the URLs and files in it. So nothing reaches ffmpeg but the containers listed in
:func:`container_of`, each read with its own demuxer named (``-f``, never guessed from the bytes) and no protocol
but the pipe and its cache (``-protocol_whitelist``); anything else, playlists first, is a 400 before ffmpeg runs.

ffmpeg and ffprobe are found in ``PATH``, or in ``--video-ffmpeg-dir`` as llama-server looks for them; without
them a video is a 400 that says so.

Example::

    options = VideoOptions(fps=4.0, timestamp_interval_ms=5000)
    video = decode_video(mp4_bytes, options, param="messages.0.content.1")
    video.frames.shape  # (8, 240, 320, 3) for 2 s of 320x240
    video.layout        # ("Video:", 0, "[0m0.00s]", 1, 2, 3, 4, 5, 6, 7)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..c_numbers import atof, atoi
from ..errors import InvalidRequest

#: llama-server's defaults (common.h ``video_fps``, ``video_timestamp_interval_ms``).
DEFAULT_FPS = 4.0
DEFAULT_TIMESTAMP_INTERVAL_MS = 5000
#: The text before a video's first frame (mtmd-helper's ``prompt_start``).
PROMPT_START = "Video:"
#: Frames one video may give, and the bytes they may take as RGB (llama-server has no bound).
MAX_FRAMES = 1024
MAX_FRAME_BYTES = 512 * 2**20
PROBE_TIMEOUT_S = 10.0
DECODE_TIMEOUT_S = 60.0
_FAILED = "Failed to load image or audio file"


@dataclass(frozen=True, slots=True)
class VideoOptions:
    """``--video-fps``, ``--video-timestamp-interval`` and ``--video-ffmpeg-dir`` (None: ``PATH``)."""

    fps: float = DEFAULT_FPS
    timestamp_interval_ms: int = DEFAULT_TIMESTAMP_INTERVAL_MS
    ffmpeg_dir: str | None = None


@dataclass(frozen=True, slots=True)
class Video:
    """A video's frames, ``(n_frames, height, width, 3)`` uint8 RGB, and its prompt layout: the texts and frame
    numbers in the order llama-server puts them in the prompt."""

    frames: npt.NDArray[np.uint8]
    layout: tuple[str | int, ...]
    #: The rate the frames were taken at.
    fps: float


@dataclass(frozen=True, slots=True)
class _Stream:
    """What ffprobe says of the first video stream (the keys mtmd-helper reads)."""

    width: int
    height: int
    #: ``r_frame_rate`` as a float32, as mtmd-helper parses it; 0 when absent or not a rate.
    fps: float


def ffmpeg_tools(options: VideoOptions) -> tuple[str, str] | None:
    """The ffmpeg and ffprobe llama-server would run (``<dir>/ffmpeg``, or the first in ``PATH``); None if either is
    missing or not executable."""
    found = []
    for name in ("ffmpeg", "ffprobe"):
        if options.ffmpeg_dir:
            path = os.path.join(options.ffmpeg_dir, name)
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                return None
        else:
            which = shutil.which(name)
            if which is None:
                return None
            path = which
        found.append(path)
    return found[0], found[1]


def missing_ffmpeg(options: VideoOptions, param: str) -> InvalidRequest:
    """The 400 for a video when ffmpeg or ffprobe cannot be found."""
    where = f"in --video-ffmpeg-dir {options.ffmpeg_dir}" if options.ffmpeg_dir else "in PATH"
    return InvalidRequest(
        f"video input needs ffmpeg and ffprobe, which this server cannot find {where} "
        "(install ffmpeg, or point --video-ffmpeg-dir at the folder that holds both)",
        param=param,
    )


#: Container signatures at the start of a file: (offset, bytes, the ffmpeg demuxer that reads it).
_CONTAINERS = (
    (4, b"ftyp", "mov"),  # MP4, MOV, 3GP, M4V
    (0, b"\x1a\x45\xdf\xa3", "matroska"),  # Matroska, WebM
    (0, b"FLV\x01", "flv"),
    (0, b"\x30\x26\xb2\x75\x8e\x66\xcf\x11", "asf"),  # ASF, WMV
    (0, b"\x00\x00\x01\xba", "mpeg"),  # MPEG program stream
    (0, b"YUV4MPEG2", "yuv4mpegpipe"),
)
#: What ffmpeg may open while it reads a video: the request's bytes on stdin, and the seekable cache over them.
_PROTOCOLS = "pipe,cache"
#: Texts ffmpeg would follow to other files or URLs (its hls, concat, dash, sdp and image2 demuxers), by their
#: first bytes: refused before ffmpeg runs, whatever the part's type.
_MANIFESTS = (
    (re.compile(rb"#EXTM3U"), "an HLS playlist"),
    (re.compile(rb"ffconcat\b|(?:#[^\n]*\n|\s)*file\s", re.IGNORECASE), "a concat list"),
    (re.compile(rb"(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<MPD\b", re.DOTALL), "a DASH manifest"),
    (re.compile(rb"v=0\r?\n"), "an SDP description"),
)


def container_of(data: bytes) -> str | None:
    """The ffmpeg demuxer for the bytes' container (MP4/MOV, Matroska/WebM, AVI, FLV, ASF, MPEG-PS/TS, Y4M), by
    their signature; None for anything else.

    ffmpeg is told this demuxer instead of guessing one from the bytes: a guess can pick a demuxer that opens
    other files or URLs named in the bytes (a playlist), which a client must never make the server do.
    """
    for offset, magic, demuxer in _CONTAINERS:
        if data[offset : offset + len(magic)] == magic:
            return demuxer
    if data[:4] == b"RIFF" and data[8:12] == b"AVI ":
        return "avi"
    if len(data) > 188 and data[0] == 0x47 and data[188] == 0x47:  # MPEG transport stream packets
        return "mpegts"
    return None


def is_video(data: bytes) -> bool:
    """Whether the bytes start like a video container ffmpeg is allowed to read here (:func:`container_of`).

    llama-server hands ffprobe any bytes that are neither audio nor an image, whatever the part's type; here
    that is done for a video part, or for bytes that look like a video in another part (an MP4 in ``image_url``).
    """
    return container_of(data) is not None


def manifest_of(data: bytes) -> str | None:
    """What the bytes are if they are a playlist, manifest or list that names other files or URLs (``an HLS
    playlist``...); None otherwise."""
    head = data[:4096].lstrip(b"\xef\xbb\xbf \t\r\n")
    return next((name for pattern, name in _MANIFESTS if pattern.match(head)), None)


def decode_video(data: bytes, options: VideoOptions, *, param: str) -> Video:
    """The video's frames and layout, as llama-server's ``mtmd_helper_video_init_from_buf`` and ``read_next``
    give them; a 400 naming ``param`` when ffmpeg is missing or the bytes are not a video it reads."""
    tools = ffmpeg_tools(options)
    if tools is None:
        raise missing_ffmpeg(options, param)
    ffmpeg, ffprobe = tools
    demuxer = video_container(data, param)
    stream = _probe(ffprobe, data, demuxer, param)
    fps = float(np.float32(options.fps)) if options.fps > 0 else stream.fps
    frames = _decode(ffmpeg, data, demuxer, stream, fps, param)
    return Video(frames, video_layout(len(frames), fps, options.timestamp_interval_ms), fps)


def video_container(data: bytes, param: str) -> str:
    """The demuxer ffmpeg reads the bytes with; a 400 naming ``param`` for bytes that are no container read
    here, and for playlists and lists of other files, which are never handed to ffmpeg."""
    if not data:
        raise InvalidRequest(f"{_FAILED}: the video is empty", param=param)
    manifest = manifest_of(data)
    if manifest is not None:
        raise InvalidRequest(
            f"{_FAILED}: the video is {manifest}, which names other files or URLs; "
            "playlists, manifests and lists are not read (send the video file's own bytes)",
            param=param,
        )
    demuxer = container_of(data)
    if demuxer is None:
        raise InvalidRequest(
            f"{_FAILED}: not a video container read here (MP4/MOV, Matroska/WebM, AVI, FLV, ASF, MPEG-PS, "
            "MPEG-TS, Y4M)",
            param=param,
        )
    return demuxer


def reading_options(demuxer: str) -> tuple[str, ...]:
    """ffprobe's and ffmpeg's input options that let them read the request's bytes with ``demuxer`` and nothing
    else: no other demuxer, and no protocol but the pipe and its cache (nested files and URLs fail to open)."""
    return ("-protocol_whitelist", _PROTOCOLS, "-format_whitelist", demuxer, "-f", demuxer)


def video_layout(n_frames: int, fps: float, timestamp_interval_ms: int) -> tuple[str | int, ...]:
    """``Video:``, then the frame numbers, each timestamp after the first frame at or past it: mtmd-helper's
    ``read_next``, in its float32 arithmetic (``elapsed = frame / fps * 1000``, ``[%dm%.2fs]``)."""
    layout: list[str | int] = [PROMPT_START]
    f32 = np.float32
    rate = f32(fps)
    interval_ms = (timestamp_interval_ms + 2**31) % 2**32 - 2**31  # mtmd-helper keeps it as an int32_t
    next_ms = f32(0)
    for frame in range(n_frames):
        layout.append(frame)
        if interval_ms <= 0:
            continue
        elapsed_ms = f32(f32(frame) / rate) * f32(1000)
        if elapsed_ms >= next_ms:
            elapsed_s = f32(elapsed_ms / f32(1000))
            minutes = int(f32(elapsed_s / f32(60)))
            seconds = f32(elapsed_s - f32(minutes) * f32(60))
            layout.append(f"[{minutes}m{float(seconds):.2f}s]")
            next_ms = f32(next_ms + f32(interval_ms))
    return tuple(layout)


def _probe(ffprobe: str, data: bytes, demuxer: str, param: str) -> _Stream:
    """mtmd-helper's ffprobe call on the bytes (through stdin), read its way: ``key=value`` lines, ``atoi`` sizes.

    An MP4 whose index (``moov``) comes after its frames cannot be probed from a pipe past a few tens of kB, and
    llama-server refuses it; it is probed again here through the seekable cache ffmpeg reads it from.
    """
    stream = _probed(ffprobe, data, demuxer, "pipe:0", param)
    if stream.width <= 0 or stream.height <= 0 or stream.fps <= 0:
        stream = _probed(ffprobe, data, demuxer, "cache:pipe:0", param)
    if stream.width <= 0 or stream.height <= 0 or stream.fps <= 0:
        raise InvalidRequest(f"{_FAILED}: ffprobe finds no video stream it can read in the bytes", param=param)
    _check_size(stream, param)
    return stream


def _probed(ffprobe: str, data: bytes, demuxer: str, source: str, param: str) -> _Stream:
    seekable = ("-read_ahead_limit", "-1") if source.startswith("cache:") else ()
    command = [
        ffprobe,
        *("-v", "quiet", *seekable, *reading_options(demuxer)),
        *("-show_entries", "stream=width,height,r_frame_rate,nb_frames,duration"),
        *("-select_streams", "v:0", "-of", "default=noprint_wrappers=1", source),
    ]
    output = _run(command, data, PROBE_TIMEOUT_S, "ffprobe", param).stdout.decode("utf-8", "replace")
    values: dict[str, str] = {}
    for line in output.splitlines():
        key, equals, value = line.partition("=")
        if equals:
            values[key] = value
    return _Stream(atoi(values.get("width", "")), atoi(values.get("height", "")), _rate(values.get("r_frame_rate")))


def _check_size(stream: _Stream, param: str) -> None:
    """A frame is an image to mtmd: the limits :mod:`.decode` puts on images (mtmd aborts on a 1x20000 one)."""
    from .decode import MAX_ASPECT_RATIO, MAX_IMAGE_PIXELS

    width, height = stream.width, stream.height
    if width * height > MAX_IMAGE_PIXELS:
        megapixels = MAX_IMAGE_PIXELS // 1_000_000
        raise InvalidRequest(f"video of {width}x{height} pixels is larger than {megapixels} megapixels", param=param)
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise InvalidRequest(
            f"video of {width}x{height} pixels is narrower than {MAX_ASPECT_RATIO}:1 allows", param=param
        )


def _decode(ffmpeg: str, data: bytes, demuxer: str, stream: _Stream, fps: float, param: str) -> npt.NDArray[np.uint8]:
    """mtmd-helper's ffmpeg call, with rotation off and one frame past the bound asked for; its output read in
    frames of ffprobe's size (a partial last frame dropped, as mtmd-helper drops it)."""
    frame_bytes = stream.width * stream.height * 3
    max_frames = min(MAX_FRAMES, MAX_FRAME_BYTES // frame_bytes)
    command = [
        ffmpeg,
        *("-nostdin", "-read_ahead_limit", "-1", "-noautorotate", *reading_options(demuxer), "-i", "cache:pipe:0"),
        *("-vf", f"fps={fps:.6f}"),
        *("-f", "rawvideo", "-pix_fmt", "rgb24", "-frames:v", str(max_frames + 1), "pipe:1", "-loglevel", "error"),
    ]
    done = _run(command, data, DECODE_TIMEOUT_S, "ffmpeg", param)
    n_frames = len(done.stdout) // frame_bytes
    if n_frames > max_frames:
        raise InvalidRequest(
            f"video gives more than {max_frames} frames of {stream.width}x{stream.height} at {fps:g} fps "
            "(send a shorter clip, or start the server with a lower --video-fps)",
            param=param,
        )
    if n_frames == 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = f" ({said[-1][:200]})" if said else ""
        raise InvalidRequest(f"{_FAILED}: ffmpeg decodes no frame from the video{reason}", param=param)
    pixels = np.frombuffer(done.stdout, dtype=np.uint8, count=n_frames * frame_bytes)
    return pixels.reshape(n_frames, stream.height, stream.width, 3)


def _run(
    command: list[str], data: bytes, timeout_s: float, name: str, param: str
) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(command, input=data, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise InvalidRequest(
            f"{_FAILED}: {name} did not finish with the video within {timeout_s:g} s", param=param
        ) from None
    except OSError as exc:
        raise InvalidRequest(f"{_FAILED}: {name} cannot be run ({exc.strerror or exc})", param=param) from None


def _rate(text: str | None) -> float:
    """mtmd-helper's ``parse_rational``: ``num/den`` (den > 0) as float32, else a plain number, else 0."""
    if not text:
        return 0.0
    parts = re.match(r"\s*([+-]?\d+)/\s*([+-]?\d+)", text)
    if parts and int(parts.group(2)) > 0:
        return float(np.float32(np.float32(int(parts.group(1))) / np.float32(int(parts.group(2)))))
    return float(np.float32(atof(text)))
