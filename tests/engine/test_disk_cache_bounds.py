"""``--cache-disk`` within bounds: a writer behind a slow disk drops (and counts) what it cannot hold, survives any
error, start-up reads only the headers of what RAM cannot take, a killed writer's ``.tmp`` goes at the next
start, and servers of several models share one folder: each reads only its own subfolder, one size for all."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, BinaryIO

import numpy as np
import pytest

from lfmserve.api.monitoring import MetricsReporter
from lfmserve.engine import disk_cache
from lfmserve.engine.disk_cache import DiskPromptCache, subfolder
from lfmserve.engine.disk_cache_file import read_header, read_payload, write_entry
from lfmserve.engine.prompt_cache import RamPromptCache
from lfmserve.engine.records import EngineConfig
from lfmserve.engine.scheduler import CachedSequence

N_STATE = 10_000


def _entry(first: int, n_state: int = N_STATE) -> CachedSequence:
    return CachedSequence(tuple(range(first, first + 40)), np.full(n_state, first % 251, dtype=np.uint8))


def _cache(folder: Path, identity: str = "model-a", **bounds: int) -> DiskPromptCache:
    max_bytes = bounds.pop("max_bytes", 2**30)
    return DiskPromptCache(folder, max_bytes, identity, max_pending_bytes=bounds.pop("max_pending_bytes", 2**30))


def _first_token(path: Path) -> int:
    """The first token of the entry in ``path``, whichever identity made it."""
    with path.open("rb") as file:
        return read_payload(file, read_header(file)).tokens[0]


def _first_tokens(folder: Path) -> list[int]:
    """The first token of each entry the files of ``folder`` (one identity's subfolder) hold, sorted."""
    return sorted(_first_token(path) for path in folder.glob("*.lfmcache"))


@pytest.fixture
def blocked_disk(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """A disk that writes nothing until the returned event is set (each write waits for it)."""
    release = threading.Event()

    def slow(out: BinaryIO, entry: CachedSequence, identity: str) -> None:
        release.wait()
        write_entry(out, entry, identity)

    monkeypatch.setattr(disk_cache, "write_entry", slow)
    return release


def test_a_slow_disk_drops_and_counts_what_the_writer_cannot_hold(
    tmp_path: Path, blocked_disk: threading.Event
) -> None:
    cache = _cache(tmp_path, max_pending_bytes=2 * N_STATE)
    for first in (100, 200, 300, 400):
        cache.save(_entry(first))  # the first is being written, the second waits, the others find no room
    assert (cache.stats.n_disk_cache_drops, cache.stats.n_disk_cache_writes) == (2, 0)
    blocked_disk.set()
    cache.close()
    assert (cache.stats.n_disk_cache_drops, cache.stats.n_disk_cache_writes) == (2, 2)
    assert _first_tokens(cache.folder) == [100, 200]
    engine = SimpleNamespace(
        slots=(),
        stats=cache.stats,
        n_waiting=0,
        ram_cache=RamPromptCache(0),
        config=EngineConfig(),
        model=SimpleNamespace(info=SimpleNamespace(size_bytes=0), released_bytes=0),
        buffers=dict,
    )
    lines = MetricsReporter(engine).render().splitlines()  # type: ignore[arg-type]
    assert [line for line in lines if line.startswith("lfmserve:disk_cache_")] == [
        "lfmserve:disk_cache_writes_total 2",
        "lfmserve:disk_cache_drops_total 2",
        "lfmserve:disk_cache_errors_total 0",
    ]


def test_an_idle_writer_takes_an_entry_bigger_than_the_bound_and_shutdown_waits_for_room(
    tmp_path: Path, blocked_disk: threading.Event
) -> None:
    cache = _cache(tmp_path, max_pending_bytes=N_STATE // 2)
    cache.save(_entry(100))  # bigger than the bound, but nothing waits
    saver = threading.Thread(target=cache.save, args=(_entry(200),), kwargs={"wait": True})
    saver.start()  # shutdown's save: no room until the first is written, then it is queued, not dropped
    blocked_disk.set()
    saver.join()
    cache.close()
    assert (cache.stats.n_disk_cache_drops, cache.stats.n_disk_cache_writes) == (0, 2)
    assert _first_tokens(cache.folder) == [100, 200]


@pytest.mark.parametrize("error", [RuntimeError("a bug"), OSError(28, "No space left on device")], ids=repr)
def test_the_writer_survives_an_error_logs_and_counts_it_and_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    calls = []

    def failing_once(out: BinaryIO, entry: CachedSequence, identity: str) -> None:
        calls.append(entry.tokens[0])
        if len(calls) == 1:
            out.write(b"half an entry")
            raise error
        write_entry(out, entry, identity)

    monkeypatch.setattr(disk_cache, "write_entry", failing_once)
    cache = _cache(tmp_path)
    with caplog.at_level(logging.WARNING):
        cache.save(_entry(100))
        cache.save(_entry(200))
        cache.close()
    assert calls == [100, 200]
    assert (cache.stats.n_disk_cache_errors, cache.stats.n_disk_cache_writes) == (1, 1)
    assert _first_tokens(cache.folder) == [200]
    assert [p.suffix for p in cache.folder.iterdir()] == [".lfmcache"]
    (record,) = caplog.records
    assert record.getMessage() == f"prompt cache entry not written to {cache.folder}: {error}"
    assert bool(record.exc_info) == (not isinstance(error, OSError))  # a bug's traceback is shown


def _spy(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Count the calls of ``disk_cache.<name>``."""
    calls: list[int] = []
    function: Callable[..., Any] = getattr(disk_cache, name)

    def counted(*args: Any) -> Any:
        calls.append(1)
        return function(*args)

    monkeypatch.setattr(disk_cache, name, counted)
    return calls


def test_start_up_reads_the_newest_entries_ram_holds_and_no_other_payload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = _cache(tmp_path)
    for first in (100, 200, 300, 400):
        cache.save(_entry(first))
    cache.save(_entry(500, n_state=3 * N_STATE))
    cache.close()
    ages = {100: 1, 200: 2, 300: 3, 400: 4, 500: 5}  # 500 the newest
    for path in cache.folder.iterdir():
        age = ages[_first_token(path)]
        os.utime(path, (age, age))
    headers, payloads = _spy(monkeypatch, "read_header"), _spy(monkeypatch, "read_payload")
    loaded = cache.load(max_bytes=2 * N_STATE)  # 500 does not fit; 400 and 300 do, and fill it
    assert [entry.tokens[0] for entry in loaded] == [400, 300]
    assert (len(headers), len(payloads)) == (3, 2)  # 200 and 100 not even opened: RAM is full
    headers.clear()
    assert cache.load(max_bytes=0) == [] and headers == []  # no RAM cache: nothing read


def test_start_up_sweeps_the_tmp_files_of_ended_writers_only(tmp_path: Path) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    folder = tmp_path / subfolder("model-b")
    folder.mkdir()
    names = {
        "ended": f"a.{int(ended.stdout)}-1f.tmp",
        "this process": f"b.{os.getpid()}-2f.tmp",  # a process id a restarted container got again
        "running": f"c.{os.getppid()}-3f.tmp",
        "no process named": "d.tmp",
        "a cache file": "e.lfmcache",
    }
    for name in names.values():
        (folder / name).write_bytes(b"partial")
    _cache(tmp_path).close()
    assert sorted(p.name for p in folder.iterdir()) == [names["running"], names["a cache file"]]


def test_models_keep_to_their_own_subfolder_and_share_one_size(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = _cache(tmp_path, "model-a")
    for entry in (_entry(100), _entry(200)):
        first.save(entry)
    first.close()
    for age, path in enumerate(sorted(first.folder.iterdir(), key=lambda p: _first_token(p)), start=1):
        os.utime(path, (age, age))  # 100 the oldest of the folder
    n_file = next(first.folder.iterdir()).stat().st_size
    second = _cache(tmp_path, "model-b", max_bytes=3 * n_file + n_file // 2)
    for entry in (_entry(300), _entry(400)):
        second.save(entry)
    second.close()
    assert second.folder != first.folder and second.folder.parent == first.folder.parent == tmp_path
    assert (_first_tokens(first.folder), _first_tokens(second.folder)) == ([200], [300, 400])
    with caplog.at_level(logging.WARNING):
        mine, theirs = _cache(tmp_path, "model-a"), _cache(tmp_path, "model-b")
        assert [e.tokens[0] for e in mine.load(2**30)] == [200]
        assert sorted(e.tokens[0] for e in theirs.load(2**30)) == [300, 400]
        mine.close()
        theirs.close()
    assert caplog.records == []  # neither even opened the other's files


def test_two_writers_of_one_model_share_its_subfolder_safely(tmp_path: Path) -> None:
    writers = [_cache(tmp_path), _cache(tmp_path)]
    entries = [_entry(first) for first in range(100, 1100, 100)]
    for entry in entries:  # the same files, written by both at once
        for writer in writers:
            writer.save(entry)
    for writer in writers:
        writer.close()
    assert [(w.stats.n_disk_cache_writes, w.stats.n_disk_cache_errors) for w in writers] == [(10, 0), (10, 0)]
    assert writers[0].folder == writers[1].folder
    assert sorted(p.suffix for p in writers[0].folder.iterdir()) == [".lfmcache"] * 10
    reader = _cache(tmp_path)
    back = {entry.tokens: entry for entry in reader.load(2**30)}
    reader.close()
    assert sorted(back) == sorted(entry.tokens for entry in entries)
    assert all(np.array_equal(back[entry.tokens].state, entry.state) for entry in entries)
