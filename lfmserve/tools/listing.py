"""The entries under a folder, as llama-server's tools list them: the files git knows (``git ls-files``, so
``.gitignore`` holds) when the folder is in a repository, else a walk that skips the usual junk folders; within
a 15-second budget (what was found by then, marked truncated)."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from typing import Literal

Kind = Literal["file", "dir", "all"]
#: Folders never walked into (llama-server's list, in its order: an isolate's ``find`` names them so).
JUNK = (
    ".git", ".svn", ".hg", "node_modules", "__pycache__", ".venv", "venv", "dist", "build", "target", ".cache",
    ".idea", ".vscode",
)  # fmt: skip
BUDGET_S = 15.0
#: What ``git ls-files`` may print.
GIT_OUTPUT_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class Entry:
    path: str  # relative, ``/``-separated
    is_dir: bool


@dataclass(frozen=True, slots=True)
class Listing:
    entries: list[Entry]
    truncated: bool  # the time budget ran out, or a folder could not be read


def within(path: str, max_depth: int) -> bool:
    """Whether a relative path is at most ``max_depth`` deep (0: any depth; 1: the folder's own entries)."""
    return max_depth == 0 or path.count("/") + 1 <= max_depth


def list_entries(base: str, *, max_depth: int, kind: Kind) -> Listing:
    """The entries under ``base``, a folder of this machine (see :func:`within` for ``max_depth``)."""
    deadline = time.monotonic() + BUDGET_S
    if kind == "file":
        known = _git_files(base, deadline)
        if known is not None:
            files = [p for p in known if within(p, max_depth) and os.path.isfile(os.path.join(base, p))]
            return Listing([Entry(path, False) for path in files], False)
    return _walk(base, max_depth, kind, deadline)


def _git_files(base: str, deadline: float) -> list[str] | None:
    try:
        done = subprocess.run(
            ["git", "-C", base, "ls-files", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            timeout=max(0.1, deadline - time.monotonic()),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    text = done.stdout[:GIT_OUTPUT_BYTES].decode(errors="replace")
    return [line.rstrip("\r").replace("\\", "/") for line in text.split("\n") if line.rstrip("\r")]


def _walk(base: str, max_depth: int, kind: Kind, deadline: float) -> Listing:
    found: list[Entry] = []
    stack = [(base, "", 0)]
    while stack:
        folder, relative, depth = stack.pop()
        try:
            with os.scandir(folder) as entries:
                children = list(entries)
        except PermissionError:
            continue
        except OSError:
            return Listing(found, True)
        for child in children:
            if time.monotonic() > deadline:
                return Listing(found, True)
            path = f"{relative}/{child.name}" if relative else child.name
            if child.is_dir():
                if kind != "file":
                    found.append(Entry(path, True))
                if child.name not in JUNK and not child.is_symlink() and (max_depth == 0 or depth + 1 < max_depth):
                    stack.append((child.path, path, depth + 1))
            elif child.is_file() and kind != "dir":
                found.append(Entry(path, False))
    return Listing(found, False)
