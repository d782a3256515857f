"""What a process holds in memory, read from ``/proc``: for ``/metrics``, ``/props``, and a router's children.

Resident memory (RSS) has two parts that weigh differently. Anonymous memory (the heap: repacked weights, KV
cache, Python's objects) is the process's alone. File-backed pages (the mapped model file, shared libraries) are
the page cache's, lent to the process: the kernel can take back the clean ones and read them again, and
processes that map the same file share them. So a process's hold on memory is counted here as its anonymous
memory plus the resident pages of its own model files, not the libraries it shares with every other process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """Bytes resident in one process (``/proc/PID/smaps_rollup``)."""

    rss: int
    anonymous: int
    #: Proportional: each shared page divided among the processes that map it.
    pss: int

    @property
    def file_backed(self) -> int:
        return self.rss - self.anonymous

    def to_json(self) -> dict[str, Any]:
        return {"resident": self.rss, "anonymous": self.anonymous, "file_backed": self.file_backed, "pss": self.pss}


def process_memory(pid: int | None = None) -> ProcessMemory | None:
    """The memory of ``pid`` (this process when None); None once it is gone."""
    fields = {"Rss": 0, "Anonymous": 0, "Pss": 0}
    try:
        with open(f"/proc/{pid or 'self'}/smaps_rollup", encoding="ascii") as rollup:
            for line in rollup:
                key, _, rest = line.partition(":")
                if key in fields:
                    fields[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return ProcessMemory(rss=fields["Rss"], anonymous=fields["Anonymous"], pss=fields["Pss"])


def mapped_bytes(pid: int | None, paths: Collection[str]) -> int:
    """Bytes of ``paths``' mappings resident in ``pid`` (``/proc/PID/smaps``); 0 once it is gone."""
    wanted = {os.path.realpath(path) for path in paths}
    total, counting = 0, False
    with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid or 'self'}/smaps") as smaps:
        for line in smaps:
            head = line.split(maxsplit=5)
            if "-" in head[0] and len(head) >= 5:  # a mapping's first line: address range, perms, offset, ...
                counting = len(head) == 6 and head[5].rstrip("\n") in wanted
            elif counting and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


def held_bytes(pid: int | None, model_files: Collection[str]) -> int:
    """What the process holds: its anonymous memory and the resident pages of its model files (0 once gone)."""
    memory = process_memory(pid)
    return 0 if memory is None else memory.anonymous + mapped_bytes(pid, model_files)
