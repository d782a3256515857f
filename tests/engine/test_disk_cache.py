"""The prompt cache's files (``--cache-disk``): entries read back exactly, and a file of another model, a truncated
or a corrupt one skipped with a warning; the folder kept within its size, oldest files out first."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from lfmserve.engine.disk_cache import DiskPromptCache, subfolder
from lfmserve.engine.disk_cache_file import MAGIC
from lfmserve.engine.scheduler import CachedSequence, Checkpoint


def _entry(first: int, n_state: int = 64) -> CachedSequence:
    state = np.arange(n_state, dtype=np.uint8)
    checkpoint = Checkpoint(3, np.full(8, 7, dtype=np.uint8), boundary=True, logits=b"\x00\x01\x02\x03")
    return CachedSequence(tuple(range(first, first + 40)), state, (checkpoint,))


def _cache(folder: Path, identity: str = "model-a", max_bytes: int = 2**30) -> DiskPromptCache:
    return DiskPromptCache(folder, max_bytes, identity, max_pending_bytes=2**30)


def _written(folder: Path, *entries: CachedSequence, identity: str = "model-a", max_bytes: int = 2**30) -> None:
    cache = _cache(folder, identity, max_bytes)
    for entry in entries:
        cache.save(entry)
    cache.close()


def _files(folder: Path, identity: str = "model-a") -> dict[int, Path]:
    """The identity's files, by their entry's first token."""
    cache = _cache(folder, identity)
    found = {}
    for path in cache.folder.glob("*.lfmcache"):
        entry = cache._read(path, 2**30)
        assert entry is not None
        found[entry.tokens[0]] = path
    cache.close()
    return found


def test_entries_come_back_exactly_newest_first(tmp_path: Path) -> None:
    first, second = _entry(1), _entry(100)
    _written(tmp_path, second, first)
    os.utime(_files(tmp_path)[100], (1, 1))
    cache = _cache(tmp_path)
    loaded = cache.load(max_bytes=2**30)
    cache.close()
    assert [entry.tokens[0] for entry in loaded] == [1, 100]  # the most recently written first
    by_tokens = {entry.tokens: entry for entry in loaded}
    for original in (first, second):
        back = by_tokens[original.tokens]
        assert np.array_equal(back.state, original.state)
        (checkpoint,) = back.checkpoints
        assert (checkpoint.n_tokens, checkpoint.boundary, checkpoint.logits) == (3, True, b"\x00\x01\x02\x03")
        assert np.array_equal(checkpoint.state, np.full(8, 7, dtype=np.uint8))
    assert [p.relative_to(tmp_path).parent.name for p in tmp_path.rglob("*") if p.is_file()] == [
        subfolder("model-a")
    ] * 2
    assert {p.suffix for p in (tmp_path / subfolder("model-a")).iterdir()} == {".lfmcache"}


def test_foreign_truncated_and_corrupt_files_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _written(tmp_path, _entry(1), _entry(300), _entry(400), _entry(500))
    _written(tmp_path, _entry(200), identity="model-b")
    files = _files(tmp_path)
    files[400].write_bytes(files[400].read_bytes()[:-10])
    data = bytearray(files[500].read_bytes())
    data[-5] ^= 0xFF
    files[500].write_bytes(bytes(data))
    own = tmp_path / subfolder("model-a")
    (own / "junk.lfmcache").write_bytes(b"not a cache file")
    (own / "long.lfmcache").write_bytes(MAGIC + (2**31).to_bytes(4, "little"))  # never allocated
    (foreign,) = _files(tmp_path, "model-b").values()
    (own / foreign.name).write_bytes(foreign.read_bytes())  # copied by hand into the wrong subfolder
    cache = _cache(tmp_path)
    with caplog.at_level(logging.WARNING):
        loaded = cache.load(max_bytes=2**30)
    cache.close()
    assert sorted(entry.tokens[0] for entry in loaded) == [1, 300]
    warnings = sorted(record.getMessage().split(": ", 1)[1] for record in caplog.records)
    payload = 4 * 40 + 64 + 8 + 4  # the tokens, the state, the checkpoint's state and logits
    assert warnings == [
        f"{payload - 10} bytes of payload where the header says {payload} (truncated?)",
        "a header of 2147483648 bytes (corrupt)",
        "checksum mismatch (corrupt)",
        "made by another model or context",
        "not a prompt cache file",
    ]


def test_the_folder_keeps_within_its_size_dropping_the_oldest(tmp_path: Path) -> None:
    for i in range(4):
        _written(tmp_path, _entry(i * 100, n_state=400_000), max_bytes=1_000_000)
        for first, path in _files(tmp_path).items():  # written in this order, which a coarse clock may not tell
            os.utime(path, (first + 1, first + 1))
    assert sum(p.stat().st_size for p in tmp_path.rglob("*.lfmcache")) <= 1_000_000
    cache = _cache(tmp_path, max_bytes=1_000_000)
    assert sorted(e.tokens[0] for e in cache.load(max_bytes=2**30)) == [200, 300]
    cache.close()
