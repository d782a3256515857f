"""The prompt cache on disk (``--cache-disk DIR``): the RAM cache's entries, written by a thread of their own and
read back when the server starts again, so a returning conversation or a long shared system prompt is not
prefilled again after a restart.

Each entry is one file: a magic line, a JSON header (the identity of the model and context that made the state,
the token count, the checkpoints' sizes, the payload's SHA-256), then the payload (the tokens, the sequence
state, each checkpoint's state and logits). A state only fits the model, context size and KV cache types that
made it (llama.cpp may abort on a state it cannot place), so a file of another identity is skipped, and so is a
truncated or corrupt one, with a warning: never loaded, never a crash. The folder is kept within
``--cache-disk-size`` by deleting the least recently written files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import struct
import threading
from pathlib import Path
from typing import Any

import numpy as np

from .scheduler import CachedSequence, Checkpoint

logger = logging.getLogger(__name__)
MAGIC = b"LFMSERVE PROMPT CACHE 1\n"
SUFFIX = ".lfmcache"
_HEADER_LENGTH = struct.Struct("<I")


class DiskPromptCache:
    """Writes entries in the background; reads them all back (newest first) at start."""

    def __init__(self, folder: str | Path, max_bytes: int, identity: str) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.identity = identity
        self._queue: queue.Queue[CachedSequence | None] = queue.Queue()
        self._writer = threading.Thread(target=self._write_all, name="lfmserve-cache-disk", daemon=True)
        self._writer.start()

    def save(self, entry: CachedSequence) -> None:
        """Queue an entry for writing (the caller, the engine thread, never waits for the disk)."""
        self._queue.put(entry)

    def close(self) -> None:
        """Write what is queued, then stop the writer."""
        self._queue.put(None)
        self._writer.join()

    def load(self) -> list[CachedSequence]:
        """This model's entries, most recently written first; other files are skipped with a warning."""
        files = sorted(self.folder.glob("*" + SUFFIX), key=_mtime, reverse=True)
        entries = []
        for path in files:
            try:
                entry = self._read(path)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                logger.warning("prompt cache file %s skipped: %s", path.name, exc)
                continue
            if entry is not None:
                entries.append(entry)
        return entries

    # -- the file format ------------------------------------------------------------------------------
    def _write_all(self) -> None:
        while (entry := self._queue.get()) is not None:
            try:
                self._write(entry)
                self._trim()
            except OSError as exc:  # a full or read-only disk costs the cache, not the server
                logger.warning("prompt cache entry not written to %s: %s", self.folder, exc)

    def _write(self, entry: CachedSequence) -> None:
        tokens = np.asarray(entry.tokens, dtype="<i4").tobytes()
        parts = [tokens, entry.state.tobytes()]
        checkpoints = []
        for checkpoint in entry.checkpoints:
            logits = checkpoint.logits or b""
            parts += [checkpoint.state.tobytes(), logits]
            checkpoints.append([checkpoint.n_tokens, checkpoint.boundary, len(checkpoint.state), len(logits)])
        digest = hashlib.sha256()
        for part in parts:
            digest.update(part)
        header = {
            "identity": self.identity,
            "n_tokens": len(entry.tokens),
            "state": len(entry.state),
            "checkpoints": checkpoints,
            "adapters": list(entry.adapters),
            "sha256": digest.hexdigest(),
        }
        key = json.dumps(header["adapters"]).encode()
        name = hashlib.sha256(self.identity.encode() + key + tokens).hexdigest()[:32] + SUFFIX
        target = self.folder / name
        partial = target.with_suffix(".tmp")
        encoded = json.dumps(header).encode()
        with partial.open("wb") as out:
            out.write(MAGIC + _HEADER_LENGTH.pack(len(encoded)) + encoded)
            for part in parts:
                out.write(part)
        os.replace(partial, target)

    def _read(self, path: Path) -> CachedSequence | None:
        data = path.read_bytes()
        if not data.startswith(MAGIC):
            raise ValueError("not a prompt cache file")
        at = len(MAGIC) + _HEADER_LENGTH.size
        (length,) = _HEADER_LENGTH.unpack_from(data, len(MAGIC))
        header: dict[str, Any] = json.loads(data[at : at + length])
        if header["identity"] != self.identity:
            logger.warning("prompt cache file %s skipped: made by another model or context", path.name)
            return None
        payload = memoryview(data)[at + length :]
        if hashlib.sha256(payload).hexdigest() != header["sha256"]:
            raise ValueError("checksum mismatch (truncated or corrupt)")
        return _entry(header, payload)

    def _trim(self) -> None:
        """Delete the least recently written files until the folder fits ``max_bytes``."""
        files = sorted(self.folder.glob("*" + SUFFIX), key=_mtime)
        total = sum(path.stat().st_size for path in files)
        for path in files:
            if total <= self.max_bytes:
                return
            total -= path.stat().st_size
            path.unlink(missing_ok=True)


def _entry(header: dict[str, Any], payload: memoryview) -> CachedSequence:
    """The entry a checked payload holds."""
    n_tokens = int(header["n_tokens"])
    at = 4 * n_tokens
    tokens = tuple(int(t) for t in np.frombuffer(payload[:at], dtype="<i4"))
    state = np.frombuffer(payload[at : at + header["state"]], dtype=np.uint8).copy()
    at += int(header["state"])
    checkpoints = []
    for n, boundary, state_length, logits_length in header["checkpoints"]:
        saved = np.frombuffer(payload[at : at + state_length], dtype=np.uint8).copy()
        at += state_length
        logits = bytes(payload[at : at + logits_length]) or None
        at += logits_length
        checkpoints.append(Checkpoint(int(n), saved, bool(boundary), logits))
    if at != len(payload) or len(tokens) != n_tokens:
        raise ValueError("the payload does not match its header")
    adapters = tuple(float(scale) for scale in header.get("adapters", ()))
    return CachedSequence(tokens, state, tuple(checkpoints), adapters)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
