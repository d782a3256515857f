"""Test media: pictures of one tint with noise (a tiny random model's answer follows the tint, so different
seeds give different answers, where pure noise gives the same one) and tones as WAV files.

Example::

    png = image_bytes(640, 480, seed=1, format="PNG")
    wav = wav_bytes(3.0)  # 16 kHz mono, a 440 Hz sine
"""

from __future__ import annotations

import io

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
