"""Images and audio for a request body: paths, bytes or PIL images in, data URLs the server can read out.

llama-server decodes images with stb_image, which reads JPEG, PNG, BMP and GIF but not WebP, TIFF or HEIC
(the seed provider converts every picture to JPEG for that reason, losing quality on PNGs). Here bytes in a
format every llama.cpp server reads go through untouched; anything else is re-encoded once, losslessly, as
PNG. Audio is sent as it is: the servers read WAV, MP3 and FLAC, and the format is told by its bytes.
"""

from __future__ import annotations

import base64
import io
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from ..errors import InvalidRequest

if TYPE_CHECKING:
    from PIL import Image

#: A picture: encoded bytes in any format Pillow reads, a path to such a file, or a PIL image.
ImageInput = Union[bytes, str, "PathLike[str]", "Image.Image"]
#: A recording: WAV, MP3 or FLAC bytes, or a path to such a file.
AudioInput = Union[bytes, str, "PathLike[str]"]

#: Leading bytes of the image formats every llama.cpp server decodes -> their MIME type.
_READABLE_IMAGES = {
    b"\xff\xd8\xff": "image/jpeg",
    b"\x89PNG\r\n\x1a\n": "image/png",
    b"GIF8": "image/gif",
    b"BM": "image/bmp",
}


def image_url(image: ImageInput) -> str:
    """A ``data:`` URL of the picture, converted to PNG only when the server could not read it as it is."""
    if isinstance(image, bytes | str | PathLike):
        data = _read(image, "image")
        for magic, mime in _READABLE_IMAGES.items():
            if data.startswith(magic):
                return _data_url(mime, data)
        return _data_url("image/png", _png(_open_image(data)))
    return _data_url("image/png", _png(image))


def image_part(image: ImageInput) -> dict[str, Any]:
    """An OpenAI ``image_url`` content part."""
    return {"type": "image_url", "image_url": {"url": image_url(image)}}


def audio_part(audio: AudioInput) -> dict[str, Any]:
    """An OpenAI ``input_audio`` content part (base64 data and its format)."""
    data = _read(audio, "audio")
    return {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(data).decode("ascii"), "format": audio_format(data)},
    }


def audio_format(data: bytes) -> str:
    """``wav``, ``mp3`` or ``flac`` from the leading bytes; anything else is refused here, before it is sent."""
    if data[:4] in (b"RIFF", b"RF64") and data[8:12] == b"WAVE":
        return "wav"
    if data[:4] == b"fLaC":
        return "flac"
    if data[:3] == b"ID3" or (len(data) >= 2 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "mp3"
    raise InvalidRequest("audio must be WAV, MP3 or FLAC (its first bytes match none of them)", param="audio")


def audio_bytes(audio: AudioInput) -> bytes:
    return _read(audio, "audio")


def blank_jpeg(width: int, height: int) -> bytes:
    """A grey JPEG of the given size: what an image costs in prompt tokens depends only on its size."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (128, 128, 128)).save(buffer, format="JPEG", quality=60)
    return buffer.getvalue()


def _read(source: bytes | str | PathLike[str], what: str) -> bytes:
    if isinstance(source, bytes):
        return source
    try:
        return Path(source).read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"cannot read the {what} file {str(source)!r}: {exc.strerror}", param=what) from exc


def _open_image(data: bytes) -> Image.Image:
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (UnidentifiedImageError, OSError) as exc:
        raise InvalidRequest(f"the image bytes are not a picture Pillow can read: {exc}", param="images") from exc
    return image


def _png(image: Image.Image) -> bytes:
    if image.mode not in ("RGB", "RGBA", "L", "LA"):
        image = image.convert("RGBA" if "A" in image.getbands() else "RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
