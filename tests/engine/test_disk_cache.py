"""The prompt cache's files (``--cache-disk``): entries read back exactly, and a file of another model, a truncated
or a corrupt one skipped with a warning; the folder kept within its size, oldest files out first."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from lfmserve.engine.disk_cache import DiskPromptCache
from lfmserve.engine.scheduler import CachedSequence, Checkpoint


def _entry(first: int, n_state: int = 64) -> CachedSequence:
    state = np.arange(n_state, dtype=np.uint8)
    checkpoint = Checkpoint(3, np.full(8, 7, dtype=np.uint8), boundary=True, logits=b"\x00\x01\x02\x03")
    return CachedSequence(tuple(range(first, first + 40)), state, (checkpoint,))


def _written(folder: Path, *entries: CachedSequence, identity: str = "model-a", max_bytes: int = 2**30) -> None:
    cache = DiskPromptCache(folder, max_bytes, identity)
    for entry in entries:
        cache.save(entry)
    cache.close()


def test_entries_come_back_exactly_newest_first(tmp_path: Path) -> None:
    first, second = _entry(1), _entry(100)
    _written(tmp_path, second, first)
    cache = DiskPromptCache(tmp_path, 2**30, "model-a")
    (older,) = [p for p in tmp_path.iterdir() if cache._read(p).tokens == second.tokens]  # type: ignore[union-attr]
    os.utime(older, (1, 1))
    loaded = cache.load()
    assert [entry.tokens[0] for entry in loaded] == [1, 100]  # the most recently written first
    by_tokens = {entry.tokens: entry for entry in loaded}
    for original in (first, second):
        back = by_tokens[original.tokens]
        assert np.array_equal(back.state, original.state)
        (checkpoint,) = back.checkpoints
        assert (checkpoint.n_tokens, checkpoint.boundary, checkpoint.logits) == (3, True, b"\x00\x01\x02\x03")
        assert np.array_equal(checkpoint.state, np.full(8, 7, dtype=np.uint8))
    assert [p.suffix for p in tmp_path.iterdir()] == [".lfmcache", ".lfmcache"]


def test_foreign_truncated_and_corrupt_files_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _written(tmp_path, _entry(1))
    _written(tmp_path, _entry(200), identity="model-b")
    good, truncated, corrupt = _entry(300), _entry(400), _entry(500)
    _written(tmp_path, good, truncated, corrupt)
    files = {tuple(DiskPromptCache(tmp_path, 2**30, "model-a")._read(p).tokens[:1]): p for p in _own(tmp_path)}  # type: ignore[union-attr]
    data = files[(400,)].read_bytes()
    files[(400,)].write_bytes(data[:-10])
    data = bytearray(files[(500,)].read_bytes())
    data[-5] ^= 0xFF
    files[(500,)].write_bytes(bytes(data))
    (tmp_path / "junk.lfmcache").write_bytes(b"not a cache file")
    with caplog.at_level(logging.WARNING):
        loaded = DiskPromptCache(tmp_path, 2**30, "model-a").load()
    assert sorted(entry.tokens[0] for entry in loaded) == [1, 300]
    warnings = " ".join(record.getMessage() for record in caplog.records)
    assert "made by another model or context" in warnings
    assert warnings.count("checksum mismatch (truncated or corrupt)") == 2 and "not a prompt cache file" in warnings


def _own(folder: Path) -> list[Path]:
    """The files of identity ``model-a`` (reading one of another identity gives None)."""
    cache = DiskPromptCache(folder, 2**30, "model-a")
    return [p for p in folder.glob("*.lfmcache") if cache._read(p) is not None]


def test_the_folder_keeps_within_its_size_dropping_the_oldest(tmp_path: Path) -> None:
    entries = [_entry(i * 100, n_state=400_000) for i in range(4)]
    cache = DiskPromptCache(tmp_path, 1_000_000, "model-a")
    for entry in entries:
        cache.save(entry)
    cache.close()
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 1_000_000
    assert sorted(e.tokens[0] for e in DiskPromptCache(tmp_path, 1_000_000, "model-a").load()) == [200, 300]
