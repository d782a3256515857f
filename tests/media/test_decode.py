"""Untrusted image and audio bytes: decoded to what a projector takes, or refused with a 400 that says why."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
import soundfile
from PIL import Image

from lfmserve.errors import InvalidRequest
from lfmserve.media.decode import decode_audio, decode_image


def _image(fmt: str, width: int = 32, height: int = 24, mode: str = "RGB", **save: object) -> bytes:
    buffer = io.BytesIO()
    image = Image.new(mode, (width, height))
    if mode == "RGB":
        image.putdata([(x * 8 % 256, y * 10 % 256, 77) for y in range(height) for x in range(width)])
    image.save(buffer, fmt, **save)
    return buffer.getvalue()


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims a size (no pixel data follows): what a decompression bomb looks like first."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IEND", b"")
    )


def _audio(seconds: float, rate: int = 16000, channels: int = 1, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    buffer = io.BytesIO()
    t = np.arange(int(seconds * rate)) / rate
    tone = (0.25 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    soundfile.write(buffer, np.repeat(tone[:, None], channels, axis=1), rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def _refused_image(data: bytes) -> str:
    with pytest.raises(InvalidRequest) as info:
        decode_image(data, param="messages.0.content.1")
    assert info.value.param == "messages.0.content.1"
    return info.value.message


def _refused_audio(data: bytes, max_seconds: float = 300) -> str:
    with pytest.raises(InvalidRequest) as info:
        decode_audio(data, sample_rate=16000, max_seconds=max_seconds, param="messages.0.content.0")
    assert info.value.param == "messages.0.content.0"
    return info.value.message


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "BMP", "TIFF", "GIF"])
def test_every_format_read_here_gives_rgb_pixels(fmt: str) -> None:
    pixels = decode_image(_image(fmt), param="p")
    assert pixels.shape == (24, 32, 3) and pixels.dtype == np.uint8 and pixels.flags["C_CONTIGUOUS"]
    if fmt in ("PNG", "BMP", "TIFF"):  # lossless: exactly the pixels written
        assert tuple(pixels[5, 3]) == (24, 50, 77)


def test_alpha_grayscale_and_16_bit_images_become_rgb() -> None:
    for mode in ("RGBA", "L", "I;16", "P"):
        assert decode_image(_image("PNG", 4, 3, mode=mode), param="p").shape == (3, 4, 3)


def test_exif_orientation_is_applied() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 clockwise to view"
    pixels = decode_image(_image("JPEG", 32, 24, exif=exif), param="p")
    assert pixels.shape == (32, 24, 3)


def test_the_first_frame_of_an_animation() -> None:
    frames = [Image.new("RGB", (8, 8), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:])
    assert tuple(decode_image(buffer.getvalue(), param="p")[0, 0]) == (255, 0, 0)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "Failed to load image or audio file: the image is empty"),
        (
            b"plain text, not an image",
            "Failed to load image or audio file: not an image in a format read here (JPEG, PNG, GIF, BMP, TIFF, WEBP)",
        ),
        (
            _image("JPEG", 64, 64)[:300],
            "Failed to load image or audio file: the image cannot be decoded (Truncated File Read)",
        ),
        (
            _png_header(0, 0),
            "Failed to load image or audio file: the image's header is invalid",
        ),
        (_png_header(30000, 30000), "image larger than 50 megapixels (by its header)"),
        (_png_header(9000, 6000), "image of 9000x6000 pixels is larger than 50 megapixels"),
        (_png_header(1, 20000), "image of 1x20000 pixels is narrower than 100:1 allows"),  # mtmd aborts on it
        (
            _image("ICO", 16, 16),
            "Failed to load image or audio file: not an image in a format read here (JPEG, PNG, GIF, BMP, TIFF, WEBP)",
        ),
    ],
    ids=["empty", "text", "truncated jpeg", "0x0 png", "bomb", "over 50 MP", "1x20000", "ico"],
)
def test_broken_or_dangerous_images_are_400s(data: bytes, message: str) -> None:
    assert _refused_image(data) == message


def test_a_1x1_image_is_read() -> None:
    assert decode_image(_image("PNG", 1, 1), param="p").shape == (1, 1, 3)  # mtmd upscales it to 64 tokens


@pytest.mark.parametrize(
    ("data", "n_samples"),
    [
        (_audio(1.0), 16000),
        (_audio(0.5, rate=44100, channels=2), 8000),  # mixed to mono and resampled
        (_audio(2.0, rate=22050, fmt="FLAC"), 32000),
        (_audio(2.0, fmt="MP3"), 32000),
        (_audio(1.0, rate=8000, subtype="PCM_U8"), 16000),
    ],
    ids=["wav", "stereo 44.1 kHz", "flac", "mp3", "8-bit 8 kHz"],
)
def test_audio_becomes_mono_samples_at_the_projectors_rate(data: bytes, n_samples: int) -> None:
    samples = decode_audio(data, sample_rate=16000, max_seconds=300, param="p")
    assert samples.dtype == np.float32 and samples.ndim == 1 and abs(len(samples) - n_samples) <= 1152  # mp3 frames
    assert 0.2 < float(np.abs(samples).max()) < 0.3


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "Failed to load image or audio file: the audio is empty"),
        (_audio(0.0), "Failed to load image or audio file: the audio has no samples"),
        (_audio(0.01), "audio of 0.010 s is shorter than 0.1 s"),  # mtmd aborts below 20 ms
        (
            b"not audio at all" * 20,
            "Failed to load image or audio file: the audio cannot be decoded (Format not recognised)",
        ),
        (
            b"\xff\xfb\x90\x64" + b"\x00garbage" * 200,
            "Failed to load image or audio file: the audio cannot be decoded (no audio frames found)",
        ),
        (
            _audio(1.0, fmt="AIFF"),
            "Failed to load image or audio file: AIFF audio is not read here (WAV, FLAC, MP3, Ogg)",
        ),
    ],
    ids=["empty", "no samples", "20 ms", "text", "mp3 garbage", "aiff"],
)
def test_broken_audio_is_a_400(data: bytes, message: str) -> None:
    assert _refused_audio(data) == message


def test_audio_longer_than_the_projector_takes_is_refused_before_decoding() -> None:
    long = _audio(400.0, rate=8000, subtype="PCM_U8")  # 3.2 MB: 400 s
    assert (
        _refused_audio(long, max_seconds=300)
        == "audio of 400.0 s is longer than the 300 s this model's projector takes"
    )
