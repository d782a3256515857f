"""Test media: pictures of one tint with noise (a tiny random model's answer follows the tint, so different
seeds give different answers, where pure noise gives the same one) and tones as WAV files.

Example::

    png = image_bytes(640, 480, seed=1, format="PNG")
    wav = wav_bytes(3.0)  # 16 kHz mono, a 440 Hz sine
    mp4 = video_bytes(2.0, 320, 240)  # ffmpeg's test pattern at 10 fps (needs ffmpeg: None without it)
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soundfile
from PIL import Image


def tinted_pixels(width: int, height: int, *, seed: int) -> npt.NDArray[np.uint8]:
    """``(height, width, 3)`` RGB: the seed's tint plus noise of +-24."""
    rng = np.random.default_rng(seed)
    noisy = rng.integers(0, 256, 3) + rng.integers(-24, 25, (height, width, 3))
    pixels: npt.NDArray[np.uint8] = np.clip(noisy, 0, 255).astype(np.uint8)
    return pixels


def image_bytes(width: int, height: int, *, seed: int, format: str = "JPEG") -> bytes:
    """:func:`tinted_pixels` encoded by Pillow as ``format`` (JPEG and WebP at quality 90)."""
    buffer = io.BytesIO()
    Image.fromarray(tinted_pixels(width, height, seed=seed)).save(buffer, format=format, quality=90)
    return buffer.getvalue()


def tone_samples(seconds: float, *, hz: float = 440.0, rate: int = 16000) -> npt.NDArray[np.float32]:
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def wav_bytes(seconds: float, *, hz: float = 440.0, rate: int = 16000) -> bytes:
    """A sine of ``hz`` as a mono float WAV file."""
    buffer = io.BytesIO()
    soundfile.write(buffer, tone_samples(seconds, hz=hz, rate=rate), rate, format="WAV")
    return buffer.getvalue()


def video_bytes(
    seconds: float, width: int, height: int, *, rate: int = 10, container: str = "mp4", codec: str = "mpeg4"
) -> bytes | None:
    """ffmpeg's ``testsrc`` pattern (a counter that moves) as a video file; None where ffmpeg is not installed.

    ``mpeg4`` is ffmpeg's own encoder, in every build (``libvpx-vp9`` for WebM needs the library).
    """
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        return None
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"clip.{container}"
        pattern = f"testsrc=duration={seconds}:size={width}x{height}:rate={rate}"
        command = [ffmpeg, "-v", "error", "-nostdin", "-f", "lavfi", "-i", pattern, "-c:v", codec, str(path)]
        subprocess.run(command, check=True, capture_output=True, timeout=60)
        return path.read_bytes()
