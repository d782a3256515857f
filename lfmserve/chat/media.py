"""A request's media parts as decoded media the projector takes, or a 400 that names the part.

Bytes come from the part's source (``media.sources``: data URI, base64, remote or local URL), then are
decoded by what they are, not by the part's type, as llama-server does (``media.decode``: WAV bytes in
an ``image_url`` part are audio; ``media.video``: bytes in a video part that are neither audio nor an image,
or an MP4 in any part, are frames taken with ffmpeg). Decoding runs in a worker thread: a large JPEG or a minute of MP3
takes tens of milliseconds of CPU that the event loop must not wait for.

Pillow, libsndfile and soxr (``media.decode``) are imported by the first media item read, not with this module:
a server without a projector, or whose requests carry no media, never loads them.

Example::

    reader = MediaReader(projector, MediaPolicy())
    media = await reader.read([(part, "messages.0.content.1")])
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import functools
import os
import secrets
from collections.abc import Sequence

from ..errors import InvalidRequest
from ..llama.mtmd import Media, Projector
from ..media.sources import MediaPolicy, media_bytes
from ..media.video import MAX_FRAME_BYTES, VideoOptions, ffmpeg_tools, missing_ffmpeg
from .request import ChatRequest, MediaType

#: Media items one request may carry (each may be up to 50 megapixels once decoded).
MAX_MEDIA_ITEMS = 64
#: The longest audio taken when the projector file does not bound it.
MAX_AUDIO_SECONDS = 600.0


#: A media item to read: its part's type (None: decided by the bytes alone), its source, and its wire field.
MediaSource = tuple[MediaType | None, str, str]


@functools.cache
def process_media_marker() -> str:
    """The text that stands for a media item in prompts, llama-server's: ``LLAMA_MEDIA_MARKER``, else random
    once per process (so a client's text cannot hold it, by chance or on purpose)."""
    return os.environ.get("LLAMA_MEDIA_MARKER") or f"<__media_{secrets.token_hex(16)}__>"


def unsupported(kind: str, param: str) -> InvalidRequest:
    """llama-server's message for media the model cannot read (a 400 here, a 500 there)."""
    return InvalidRequest(
        f"{kind} input is not supported - hint: if this is unexpected, you may need to provide the mmproj",
        param=param,
    )


def media_type_of_base64(data: str) -> MediaType:
    """Whether base64 data holds audio or an image, by its first bytes (Ollama's ``images`` carry audio too, and a
    part's type decides which projector check it gets before its bytes are read)."""
    head = "".join(data[:96].split()).replace("-", "+").replace("_", "/")
    try:
        start = base64.b64decode(head[: len(head) // 4 * 4], validate=True)
    except (binascii.Error, ValueError):
        return "image"  # not base64: reading it fails later, naming the part
    from ..media.decode import is_audio

    return "audio" if is_audio(start) else "image"


def chat_media_sources(request: ChatRequest) -> list[MediaSource]:
    """Every media part of a chat, in prompt order."""
    return [
        (part.type, part.source, f"messages.{i}.content.{j}")
        for i, message in enumerate(request.messages)
        if isinstance(message.content, tuple)
        for j, part in enumerate(message.content)
        if part.type != "text"
    ]


class MediaReader:
    """Reads media for one projector (or refuses all of it, without one)."""

    def __init__(
        self,
        projector: Projector | None,
        policy: MediaPolicy,
        video: VideoOptions | None = None,
        *,
        video_decodes: int = 1,
    ) -> None:
        self._projector = projector
        self._policy = policy
        self._video = video or VideoOptions()
        #: Videos decoded at once, each up to MAX_FRAME_BYTES of frames and an ffmpeg process: a burst of video
        #: requests waits here instead of holding many of those together.
        self._video_decodes = asyncio.Semaphore(video_decodes)

    @property
    def modalities(self) -> dict[str, bool]:
        """What ``/props`` reports: ``vision``, ``audio``, and ``video`` with vision (as llama-server built with
        video reports it, whether or not ffmpeg is there: a video part then gets a 400 saying it is missing)."""
        projector = self._projector
        return {
            "vision": projector is not None and projector.vision,
            "audio": projector is not None and projector.audio,
            "video": projector is not None and projector.video,
        }

    def check_types(self, sources: Sequence[MediaSource]) -> None:
        """Refuse parts whose type the projector cannot read (before anything is fetched)."""
        if len(sources) > MAX_MEDIA_ITEMS:
            raise InvalidRequest(f"at most {MAX_MEDIA_ITEMS} media items per request (got {len(sources)})")
        for kind, _, param in sources:
            if kind is None and self._projector is None:
                raise unsupported("image", param)
            if kind is not None:
                self._check_supported(kind, param)

    async def read(self, sources: Sequence[MediaSource]) -> list[Media]:
        """The decoded media of the sources, in order."""
        self.check_types(sources)
        video = next((param for kind, _, param in sources if kind == "video"), None)
        if video is not None and ffmpeg_tools(self._video) is None:  # before anything is fetched
            raise missing_ffmpeg(self._video, video)
        media: list[Media] = []
        for kind, source, param in sources:
            data = await media_bytes(source, self._policy, param=param)
            async with self._video_decodes if reads_as_video(kind, data) else contextlib.nullcontext():
                media.append(await asyncio.to_thread(self.decode, kind, data, param))
            frame_bytes = sum(item.data.nbytes for item in media if item.kind == "video")
            if frame_bytes > MAX_FRAME_BYTES:  # one video is bounded by it; the request's videos together too
                raise InvalidRequest(
                    f"the request's videos give more than {MAX_FRAME_BYTES >> 20} MiB of frames", param=param
                )
        return media

    def _check_supported(self, kind: MediaType, param: str) -> None:
        if not self.modalities["vision" if kind == "image" else kind]:
            raise unsupported(kind, param)

    def decode(self, kind: MediaType | None, data: bytes, param: str) -> Media:
        """One item's bytes as decoded media, by what the bytes are; a 400 naming ``param`` when they are neither
        an image, audio nor a video the projector reads (call :meth:`check_types` first)."""
        from ..media.decode import decode_audio, decode_image, is_audio, is_image
        from ..media.video import decode_video

        projector = self._projector
        assert projector is not None  # checked by the part's type first
        # Bytes that are neither audio nor an image, in an audio part: refused as audio, not as "not an image".
        if is_audio(data) or (kind == "audio" and not is_image(data)):
            self._check_supported("audio", param)
            seconds = projector.max_audio_seconds or MAX_AUDIO_SECONDS
            return Media.audio(decode_audio(data, sample_rate=projector.sample_rate, max_seconds=seconds, param=param))
        if reads_as_video(kind, data):
            self._check_supported("video", param)
            video = decode_video(data, self._video, param=param)
            return Media.video(video.frames, video.layout)
        self._check_supported("image", param)
        return Media.image(decode_image(data, param=param))


def reads_as_video(kind: MediaType | None, data: bytes) -> bool:
    """Whether an item's bytes go to the video reader: neither audio nor an image, and in a video part, or a
    video container or a playlist in any part (a playlist is refused there, by name, before ffmpeg runs)."""
    from ..media.decode import is_audio, is_image
    from ..media.video import is_video, manifest_of

    if is_audio(data) or is_image(data):
        return False
    return kind == "video" or is_video(data) or manifest_of(data) is not None
