"""What a model takes besides text, read from its projector file on disk, so that ``/v1/models`` says it even
while the model is not loaded (llama-server reads the file the same way). A file is parsed once per version;
callers read it off the event loop."""

from __future__ import annotations

import functools
import logging
import os

from gguf import GGUFReader

logger = logging.getLogger(__name__)


def input_modalities(projector: str | None) -> list[str]:
    """``["text"]``, plus ``"image"`` and ``"audio"`` as the projector's ``clip.has_*_encoder`` keys say."""
    if projector is None:
        return ["text"]
    try:
        stamp = os.stat(projector).st_mtime_ns
    except OSError:
        return ["text"]
    return ["text", *_encoders(projector, stamp)]


@functools.cache  # one entry per file version: a router listing many models reads each projector once
def _encoders(path: str, stamp: int) -> tuple[str, ...]:  # noqa: ARG001 - the stamp keys the cache
    try:
        fields = GGUFReader(path).fields
    except Exception as exc:  # not a GGUF, truncated, unreadable: a projector that adds nothing
        logger.warning("cannot read the projector %s: %s", path, exc)
        return ()

    def has(key: str) -> bool:
        field = fields.get(key)
        return field is not None and bool(field.parts[field.data[0]][0])

    return tuple(name for key, name in (("vision", "image"), ("audio", "audio")) if has(f"clip.has_{key}_encoder"))
