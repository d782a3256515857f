"""The prompt cache on disk (``--cache-disk DIR``): the RAM cache's entries, written by a thread of their own and
read back when the server starts again, so a returning conversation or a long shared system prompt is not
prefilled again after a restart.

Each entry is one file (:mod:`~lfmserve.engine.disk_cache_file`) in the subfolder of the identity that made
it: the llama.cpp build, the model, a slot's size, the KV cache types. A state only fits that identity
(llama.cpp may abort on a state it cannot place), so servers of other models, a router's children among them,
share the folder without reading each other's files; the same model served twice shares its subfolder (the
file names are the entries' hashes, and each writer renames a finished file into place). ``--cache-disk-size``
bounds the whole folder: after each write, the writer deletes the least recently written files of every
subfolder until the folder fits, so a model that is no longer served (or a llama.cpp since upgraded) gives its
room back. A file another server deletes meanwhile is simply not there.

The engine thread never waits for the disk, and a slow disk does not grow memory: the entries waiting for the
writer hold at most ``max_pending_bytes``; past that an entry is dropped from the disk (it stays in RAM) and
counted. An error costs the entry, never the writer. A writer killed mid-file leaves a ``.tmp`` file named
after its process, deleted by the next server that starts once that process has ended.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from .disk_cache_file import SUFFIX, file_name, read_header, read_payload, write_entry
from .records import EngineStats
from .scheduler import CachedSequence

logger = logging.getLogger(__name__)
PARTIAL = ".tmp"


class DiskPromptCache:
    """Writes entries in the background, within bounds; reads this identity's back, newest first, at start.

    Example::

        disk = DiskPromptCache("cache", 8 * 2**30, identity, max_pending_bytes=2**30, stats=stats)
        entries = disk.load(max_bytes=2 * 2**30)   # as many of the newest as 2 GiB of RAM hold
        disk.save(entry)                           # queued; dropped (stats.n_disk_cache_drops) when 1 GiB waits
        disk.close()                               # what is queued is written first
    """

    def __init__(
        self,
        folder: str | Path,
        max_bytes: int,
        identity: str,
        *,
        max_pending_bytes: int,
        stats: EngineStats | None = None,
    ) -> None:
        self.root = Path(folder)
        self.folder = self.root / subfolder(identity)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.max_pending_bytes = max_pending_bytes
        self.identity = identity
        self.stats = stats if stats is not None else EngineStats()
        sweep_partials(self.root)
        self._pending: deque[CachedSequence | None] = deque()  # None: the writer stops there
        self._n_pending_bytes = 0  # the queued entries' and the one being written
        self._changed = threading.Condition()
        self._writer = threading.Thread(target=self._write_all, name="lfmserve-cache-disk", daemon=True)
        self._writer.start()

    def save(self, entry: CachedSequence, *, wait: bool = False) -> None:
        """Queue an entry for writing. When the entries still to be written hold ``max_pending_bytes`` already,
        it is dropped and counted, so the engine thread never waits for the disk; with ``wait`` (at shutdown,
        when nothing else waits) the caller waits for room instead."""
        with self._changed:
            while not self._has_room(entry.n_bytes):
                if not wait:
                    self.stats.n_disk_cache_drops += 1
                    logger.debug("prompt cache entry of %d tokens not written: the disk is behind", len(entry.tokens))
                    return
                self._changed.wait()
            self._pending.append(entry)
            self._n_pending_bytes += entry.n_bytes
            self._changed.notify_all()

    def close(self) -> None:
        """Write what is queued, then stop the writer (once: a second call finds it stopped)."""
        if not self._writer.is_alive():
            return
        with self._changed:
            self._pending.append(None)
            self._changed.notify_all()
        self._writer.join()

    def load(self, max_bytes: int) -> list[CachedSequence]:
        """This identity's entries, most recently written first, as many as ``max_bytes`` of RAM hold.

        Each file's header is checked before its payload is read, so a file that does not fit what is left
        costs a few hundred bytes of reading; a truncated or corrupt one is skipped with a warning.
        """
        entries: list[CachedSequence] = []
        n_left = max_bytes
        for path in reversed(_oldest_first(self.folder.glob("*" + SUFFIX))):
            if n_left <= 0:
                break
            try:
                entry = self._read(path, n_left)
            except FileNotFoundError:
                continue  # another server's writer trimmed it since the listing
            except (OSError, ValueError) as exc:
                logger.warning("prompt cache file %s skipped: %s", path.name, exc)
                continue
            if entry is not None:
                entries.append(entry)
                n_left -= entry.n_bytes
        return entries

    def _read(self, path: Path, n_left: int) -> CachedSequence | None:
        """The file's entry; None when another identity made it, or when it needs more than ``n_left`` bytes."""
        with path.open("rb") as file:
            header = read_header(file)
            if header.identity != self.identity:
                logger.warning("prompt cache file %s skipped: made by another model or context", path.name)
                return None
            if header.n_bytes > n_left:
                return None  # an older, smaller entry may still fit
            return read_payload(file, header)

    # -- the writer thread ------------------------------------------------------------------------
    def _has_room(self, n_bytes: int) -> bool:
        # An idle writer takes any entry, so one bigger than the bound is still written (the RAM cache holds it).
        return self._n_pending_bytes == 0 or self._n_pending_bytes + n_bytes <= self.max_pending_bytes

    def _write_all(self) -> None:
        while (entry := self._next()) is not None:
            try:
                self._write(entry)
                self.stats.n_disk_cache_writes += 1
                self._trim()
            except Exception as exc:  # a full disk, or a bug, costs the cache this entry, not the writer thread
                self.stats.n_disk_cache_errors += 1
                logger.warning(
                    "prompt cache entry not written to %s: %s", self.folder, exc, exc_info=not isinstance(exc, OSError)
                )
            finally:
                with self._changed:
                    self._n_pending_bytes -= entry.n_bytes
                    self._changed.notify_all()

    def _next(self) -> CachedSequence | None:
        with self._changed:
            while not self._pending:
                self._changed.wait()
            return self._pending.popleft()

    def _write(self, entry: CachedSequence) -> None:
        """Write the entry to a file of this writer's own, then rename it into place (readers never see half)."""
        target = self.folder / file_name(self.identity, entry)
        partial = target.with_suffix(f".{os.getpid()}-{id(self):x}{PARTIAL}")
        try:
            with partial.open("wb") as out:
                write_entry(out, entry, self.identity)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)  # a failed write leaves nothing behind

    def _trim(self) -> None:
        """Delete the least recently written files of the whole folder, every identity's, until it fits
        ``max_bytes``."""
        sizes = _oldest_first(self.root.glob(f"*/*{SUFFIX}"))
        n_bytes = sum(sizes.values())
        for path, size in sizes.items():
            if n_bytes <= self.max_bytes:
                return
            path.unlink(missing_ok=True)
            n_bytes -= size


def subfolder(identity: str) -> str:
    """The subfolder of an identity's files: a short hash of it."""
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def sweep_partials(root: Path) -> None:
    """Delete the ``.tmp`` files of writers killed mid-write: those whose process (named in the file) has ended,
    or is this one, whose writer has not started yet (a restarted container often gets its old process id)."""
    for path in root.glob(f"*/*{PARTIAL}"):
        pid = path.stem.rpartition(".")[2].partition("-")[0]
        if not pid.isdigit() or int(pid) == os.getpid() or not _alive(int(pid)):
            path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # no signal sent: only whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


def _oldest_first(paths: Iterable[Path]) -> dict[Path, int]:
    """The files that still exist, least recently written first, with their sizes in bytes."""
    found = {}
    for path in paths:
        try:
            found[path] = path.stat()
        except OSError:
            continue  # deleted by another server's writer since the listing
    return {path: stat.st_size for path, stat in sorted(found.items(), key=lambda item: item[1].st_mtime_ns)}
