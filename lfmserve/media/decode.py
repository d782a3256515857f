"""Image and audio bytes to RGB pixels and mono samples, or a 400 that says what is wrong with them.

Images: JPEG, PNG, GIF (first frame), BMP, TIFF and WebP through Pillow (WebP is one llama-server cannot
read), EXIF orientation applied, converted to RGB; at most 50 megapixels (a decompression bomb is refused
from its header, before anything is decoded) and an aspect ratio of at most 100:1 (mtmd aborts on a
1x20000 image). Audio: WAV, FLAC, MP3 and Ogg through libsndfile, mixed to mono float32 and resampled
(soxr) to the projector's rate; at least 0.1 s (mtmd aborts below 20 ms) and at most what the projector
can take.

Example::

    pixels = decode_image(jpeg_bytes, param="messages.0.content.1")       # (height, width, 3) uint8
    samples = decode_audio(wav_bytes, sample_rate=16000, max_seconds=300.0, param="...")
"""

from __future__ import annotations

import io
import re
import warnings

import numpy as np
import numpy.typing as npt
import soundfile
import soxr
from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import InvalidRequest

#: llama-server's message for media it cannot read; lfmserve adds what was wrong.
FAILED = "Failed to load image or audio file"
IMAGE_FORMATS = ("JPEG", "PNG", "GIF", "BMP", "TIFF", "WEBP")
AUDIO_FORMATS = frozenset({"WAV", "WAVEX", "RF64", "FLAC", "MP3", "OGG"})
MAX_IMAGE_PIXELS = 50_000_000
MAX_ASPECT_RATIO = 100
MIN_AUDIO_SECONDS = 0.1
# Pillow's own decompression-bomb check, at our limit: it warns above it (refused below, with the size) and
# raises at twice it, from the header alone.
Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS


def decode_image(data: bytes, *, param: str) -> npt.NDArray[np.uint8]:
    """The image's pixels as ``(height, width, 3)`` uint8 RGB, upright."""
    if not data:
        raise InvalidRequest(f"{FAILED}: the image is empty", param=param)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # our own limit is checked below
            image = Image.open(io.BytesIO(data), formats=IMAGE_FORMATS)
        with image:
            width, height = image.size
            _check_size(width, height, param)
            image.seek(0)  # the first frame of an animation
            upright = ImageOps.exif_transpose(image)
            pixels = np.asarray(upright.convert("RGB"), dtype=np.uint8)
    except InvalidRequest:
        raise
    except Image.DecompressionBombError:
        raise InvalidRequest(
            f"image larger than {MAX_IMAGE_PIXELS // 1_000_000} megapixels (by its header)", param=param
        ) from None
    except UnidentifiedImageError:
        if is_image(data):  # the signature of a format read here, with a header Pillow refused (a 0x0 PNG)
            raise InvalidRequest(f"{FAILED}: the image's header is invalid", param=param) from None
        raise InvalidRequest(
            f"{FAILED}: not an image in a format read here ({', '.join(IMAGE_FORMATS)})", param=param
        ) from None
    except (OSError, ValueError, SyntaxError, EOFError) as exc:  # truncated or corrupt
        raise InvalidRequest(f"{FAILED}: the image cannot be decoded ({exc})", param=param) from None
    return np.ascontiguousarray(pixels)


def _check_size(width: int, height: int, param: str) -> None:
    if width < 1 or height < 1:
        raise InvalidRequest(f"{FAILED}: the image is {width}x{height} pixels", param=param)
    if width * height > MAX_IMAGE_PIXELS:
        raise InvalidRequest(
            f"image of {width}x{height} pixels is larger than {MAX_IMAGE_PIXELS // 1_000_000} megapixels", param=param
        )
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise InvalidRequest(
            f"image of {width}x{height} pixels is narrower than {MAX_ASPECT_RATIO}:1 allows", param=param
        )


def decode_audio(data: bytes, *, sample_rate: int, max_seconds: float, param: str) -> npt.NDArray[np.float32]:
    """The audio as mono float32 samples at ``sample_rate`` Hz."""
    if not data:
        raise InvalidRequest(f"{FAILED}: the audio is empty", param=param)
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as sound:
            if sound.format not in AUDIO_FORMATS:
                raise InvalidRequest(
                    f"{FAILED}: {sound.format} audio is not read here (WAV, FLAC, MP3, Ogg)", param=param
                )
            _check_length(sound.frames, sound.samplerate, max_seconds, param)
            samples = sound.read(dtype="float32", always_2d=True)
            rate = sound.samplerate
    except InvalidRequest:
        raise
    except (soundfile.LibsndfileError, RuntimeError, ValueError, TypeError) as exc:
        reason = re.sub(r"^Error opening .*?: ", "", str(exc)).rstrip(".")  # not the BytesIO's repr
        if "not a regular file" in reason:  # libsndfile's words for an MPEG stream with no readable frame
            reason = "no audio frames found"
        raise InvalidRequest(f"{FAILED}: the audio cannot be decoded ({reason})", param=param) from None
    _check_length(len(samples), rate, max_seconds, param)  # what was actually there, not what the header said
    mono = samples.mean(axis=1, dtype=np.float32) if samples.shape[1] > 1 else samples[:, 0]
    if not np.isfinite(mono).all():
        raise InvalidRequest(f"{FAILED}: the audio holds samples that are not numbers", param=param)
    resampled = mono if rate == sample_rate else soxr.resample(mono, rate, sample_rate)
    return np.ascontiguousarray(resampled, dtype=np.float32)


def _check_length(frames: int, rate: int, max_seconds: float, param: str) -> None:
    if rate <= 0 or frames <= 0:
        raise InvalidRequest(f"{FAILED}: the audio has no samples", param=param)
    seconds = frames / rate
    if seconds < MIN_AUDIO_SECONDS:
        raise InvalidRequest(f"audio of {seconds:.3f} s is shorter than {MIN_AUDIO_SECONDS} s", param=param)
    if seconds > max_seconds:
        raise InvalidRequest(
            f"audio of {seconds:.1f} s is longer than the {max_seconds:.0f} s this model's projector takes", param=param
        )


def is_audio(data: bytes) -> bool:
    """Whether the bytes start like audio (WAV, RF64, MP3, FLAC, Ogg); anything else is read as an image.

    llama-server decides by the bytes too, not by the part's type (mtmd-helper's magic numbers, plus Ogg).
    """
    head = data[:12]
    if head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE":
        return True
    if head[:3] == b"ID3" or head[:4] in (b"fLaC", b"OggS"):
        return True
    return len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0  # an MPEG audio frame


def is_image(data: bytes) -> bool:
    """Whether the bytes start with the signature of a format read here (Pillow's own check, header unread)."""
    Image.init()
    return any(accept(data[:16]) for accept in (Image.OPEN[fmt][1] for fmt in IMAGE_FORMATS) if accept is not None)
