"""One ``--cache-disk`` file: a magic line, a JSON header, then the payload of one prompt cache entry.

The header comes first and says everything that decides whether the payload is worth reading: the identity of
the model and context that made the state, the token count, the sizes of the state and of each checkpoint, the
payload's SHA-256. So a reader checks a file of another model, a truncated one, or one too big for the RAM
left, from its first few hundred bytes, and reads a payload straight into the arrays the entry keeps (never
the whole file into memory first, then a copy).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from io import BufferedReader
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from .scheduler import CachedSequence, Checkpoint

MAGIC = b"LFMSERVE PROMPT CACHE 1\n"
SUFFIX = ".lfmcache"
_HEADER_LENGTH = struct.Struct("<I")
#: A header is a few hundred bytes (32 checkpoints' sizes at most): a longer length field is corruption, and
#: must not make the reader allocate gigabytes.
MAX_HEADER_BYTES = 2**20


@dataclass(frozen=True, slots=True)
class CheckpointSizes:
    """What the header says of one checkpoint: its position and the byte sizes of its state and logits."""

    n_tokens: int
    boundary: bool
    n_state_bytes: int
    n_logits_bytes: int


@dataclass(frozen=True, slots=True)
class Header:
    """A file's header, checked before a byte of its payload is read."""

    identity: str
    n_tokens: int
    n_state_bytes: int
    checkpoints: tuple[CheckpointSizes, ...]
    adapters: tuple[float, ...]
    sha256: str

    @property
    def n_bytes(self) -> int:
        """The RAM the entry takes once read (:attr:`CachedSequence.n_bytes`)."""
        return self.n_state_bytes + sum(c.n_state_bytes + c.n_logits_bytes for c in self.checkpoints)

    @property
    def n_payload_bytes(self) -> int:
        """The payload's length: the tokens (4 bytes each), then the states and logits."""
        return 4 * self.n_tokens + self.n_bytes


def file_name(identity: str, entry: CachedSequence) -> str:
    """The entry's file name: the same tokens under the same scales replace their own earlier file."""
    key = identity.encode() + json.dumps(list(entry.adapters)).encode() + _token_bytes(entry.tokens)
    return hashlib.sha256(key).hexdigest()[:32] + SUFFIX


def write_entry(out: BinaryIO, entry: CachedSequence, identity: str) -> None:
    """Write ``entry``'s header and payload to ``out``."""
    parts = [_token_bytes(entry.tokens), entry.state.tobytes()]
    checkpoints = []
    for checkpoint in entry.checkpoints:
        logits = checkpoint.logits or b""
        parts += [checkpoint.state.tobytes(), logits]
        checkpoints.append([checkpoint.n_tokens, checkpoint.boundary, len(checkpoint.state), len(logits)])
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    header = {
        "identity": identity,
        "n_tokens": len(entry.tokens),
        "state": len(entry.state),
        "checkpoints": checkpoints,
        "adapters": list(entry.adapters),
        "sha256": digest.hexdigest(),
    }
    encoded = json.dumps(header).encode()
    out.write(MAGIC + _HEADER_LENGTH.pack(len(encoded)) + encoded)
    for part in parts:
        out.write(part)


def read_header(file: BufferedReader) -> Header:
    """The header at the start of ``file``, which is left at the payload; ValueError when it is not one, or when
    the file is shorter or longer than the header says."""
    start = file.read(len(MAGIC) + _HEADER_LENGTH.size)
    if len(start) < len(MAGIC) + _HEADER_LENGTH.size or not start.startswith(MAGIC):
        raise ValueError("not a prompt cache file")
    (length,) = _HEADER_LENGTH.unpack_from(start, len(MAGIC))
    if length > MAX_HEADER_BYTES:
        raise ValueError(f"a header of {length} bytes (corrupt)")
    try:
        header = _parse(json.loads(file.read(length)))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"unreadable header ({exc})") from exc
    n_left = os.fstat(file.fileno()).st_size - file.tell()
    if n_left != header.n_payload_bytes:
        raise ValueError(f"{n_left} bytes of payload where the header says {header.n_payload_bytes} (truncated?)")
    return header


def read_payload(file: BufferedReader, header: Header) -> CachedSequence:
    """The entry whose payload follows ``header`` in ``file``, each part read straight into its array, and
    checked against the header's SHA-256 (ValueError when it differs)."""
    digest = hashlib.sha256()
    tokens = _read(file, 4 * header.n_tokens, digest).view("<i4")
    state = _read(file, header.n_state_bytes, digest)
    checkpoints = []
    for sizes in header.checkpoints:
        saved = _read(file, sizes.n_state_bytes, digest)
        logits = _read(file, sizes.n_logits_bytes, digest).tobytes() or None
        checkpoints.append(Checkpoint(sizes.n_tokens, saved, sizes.boundary, logits))
    if digest.hexdigest() != header.sha256:
        raise ValueError("checksum mismatch (corrupt)")
    return CachedSequence(tuple(int(t) for t in tokens), state, tuple(checkpoints), header.adapters)


def _parse(fields: dict[str, Any]) -> Header:
    checkpoints = tuple(
        CheckpointSizes(int(n), bool(boundary), _size(state), _size(logits))
        for n, boundary, state, logits in fields["checkpoints"]
    )
    adapters = tuple(float(scale) for scale in fields.get("adapters", ()))
    return Header(
        identity=str(fields["identity"]),
        n_tokens=_size(fields["n_tokens"]),
        n_state_bytes=_size(fields["state"]),
        checkpoints=checkpoints,
        adapters=adapters,
        sha256=str(fields["sha256"]),
    )


def _size(value: Any) -> int:
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"a size of {value!r}")
    return value


def _read(file: BufferedReader, n_bytes: int, digest: hashlib._Hash) -> npt.NDArray[np.uint8]:
    """The next ``n_bytes`` of ``file`` in a fresh array, added to ``digest``."""
    out = np.empty(n_bytes, dtype=np.uint8)
    if file.readinto(out.data) != n_bytes:
        raise ValueError("the file ended before its payload did")
    digest.update(out.data)
    return out


def _token_bytes(tokens: tuple[int, ...]) -> bytes:
    return np.asarray(tokens, dtype="<i4").tobytes()
