"""Media input (images, audio, video) and the embeddings and reranking routes.

One group of :class:`~lfmserve.settings.Settings` (:mod:`.groups` lists them all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .fields import flag, switch
from .sampler_flags import finite_float


@dataclass(frozen=True, slots=True, kw_only=True)
class MediaSettings:
    """How media parts are fetched, decoded and encoded, and how much encoder output is kept."""

    TITLE: ClassVar[str] = "images and audio"

    mmproj_offload: bool = switch(
        "--mmproj-offload",
        help="run the projector on a GPU when there is one (--no-mmproj-offload: on the CPU)",
        default=True,
    )
    image_min_tokens: int = field(
        default=-1,
        metadata=flag("--image-min-tokens", help="fewest tokens an image takes (-1 = the projector's)", type=int),
    )
    image_max_tokens: int = field(
        default=-1,
        metadata=flag("--image-max-tokens", help="most tokens an image takes (-1 = the projector's)", type=int),
    )
    media_path: str | None = field(
        default=None, metadata=flag("--media-path", help="folder that file:// media URLs are read from")
    )
    media_fetch: bool = switch(
        "--media-fetch",
        help="fetch http(s):// media URLs (default; --no-media-fetch refuses them)",
        default=True,
    )
    media_fetch_private: bool = switch(
        "--media-fetch-private",
        help="allow media URLs whose host is a loopback, private or link-local address",
        default=False,
        action="store_true",
    )
    media_encode_beside: bool = switch(
        "--media-encode-beside",
        help="encode media on half the cores while other streams keep generating (default; holds the "
        "projector twice; --no-media-encode-beside: streams wait for each encode, as in llama-server)",
        default=True,
    )
    media_cache: int = field(
        default=256,
        metadata=flag("--media-cache", help="MiB of projector output kept for media seen before (0 = off)", type=int),
    )
    video_fps: float = field(
        default=4.0,
        metadata=flag(
            "--video-fps", help="frames per second taken from a video (0 = the video's own rate)", type=finite_float
        ),
    )
    video_timestamp_interval: int = field(
        default=5000,
        metadata=flag(
            "--video-timestamp-interval",
            help="milliseconds between the timestamps written between a video's frames (0 = none)",
            type=int,
        ),
    )
    video_ffmpeg_dir: str | None = field(
        default=None,
        metadata=flag(
            "--video-ffmpeg-dir", help="folder holding the ffmpeg and ffprobe that read videos (default: PATH)"
        ),
    )
    video_decodes: int = field(
        default=0,
        metadata=flag(
            "--video-decodes",
            help="videos decoded at once, each up to 512 MiB of frames; more wait (0 = half the cores, at least 1)",
            type=int,
        ),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbeddingSettings:
    """Whether the embedding routes are served, and how a text's token vectors become one."""

    TITLE: ClassVar[str] = "embeddings and reranking"

    embeddings: bool = switch(
        "--embedding",
        "--embeddings",
        help="also serve /v1/embeddings and /embedding (a second context; chat and completions keep working)",
        default=False,
        action="store_true",
    )
    reranking: bool = switch(
        "--rerank",
        "--reranking",
        help="also serve /rerank and /v1/rerank (embeddings with rank pooling; the model needs a classifier head)",
        default=False,
        action="store_true",
    )
    pooling: str | None = field(
        default=None,
        metadata=flag(
            "--pooling",
            help="how a text's token embeddings become one vector (default: the model's)",
            choices=("none", "mean", "cls", "last", "rank"),
        ),
    )
    embd_normalize: int = field(
        default=2,
        metadata=flag(
            "--embd-normalize",
            help="embedding normalisation: 2 Euclidean (default), -1 none, 0 max-abs to int16, 1 taxicab, p > 2 p-norm",
            type=int,
        ),
    )
