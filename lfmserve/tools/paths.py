"""Where a tool call's paths lead: relative to the call's folder (``x-tool-cwd``, else the server's), ``~`` the
home folder, ``..`` resolved in the text as llama-server does (``lexically_normal``). With ``--tools-root`` (not
in llama-server) every path must stay inside the root once symlinks are followed: ``../``, an absolute path
elsewhere, or a link that leads out is refused, and the call's folder defaults to the root."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


class OutsideRoot(ValueError):
    """A path that leads out of ``--tools-root``."""


@dataclass(frozen=True, slots=True)
class CallPaths:
    """How one call's paths resolve: its folder (``""``: the server's), and the root they must stay in."""

    cwd: str = ""
    root: str | None = None

    @property
    def folder(self) -> str:
        """The folder the call's relative paths and its commands start from (checked against the root)."""
        if self.cwd:
            return self.resolve(self.cwd)
        return self.root if self.root is not None else os.getcwd()

    def resolve(self, path: str) -> str:
        """``path`` made absolute and normal; :class:`OutsideRoot` if it leaves the root."""
        home = os.environ.get("HOME", "")
        if home and (path == "~" or path.startswith(("~/", "~\\"))):
            path = home + path[1:]
        if not os.path.isabs(path):
            base = self.cwd if self.cwd else (self.root if self.root is not None else os.getcwd())
            path = os.path.join(base, path)
        normal = os.path.normpath(path)
        if normal.startswith("//"):  # POSIX keeps a leading double slash; llama.cpp's normal form does not
            normal = "/" + normal.lstrip("/")
        if self.root is not None:
            _check_inside(normal, self.root)
        return normal


def _check_inside(path: str, root: str) -> None:
    """``path`` and whatever its links lead to are inside ``root`` (a path not there yet: its folder's)."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if not (real == real_root or real.startswith(real_root.rstrip("/") + "/")):
        raise OutsideRoot(f"{path} is outside the tools root {root}")


def root_folder(root: str) -> str:
    """``--tools-root``'s folder, absolute; it must exist."""
    folder = Path(root).expanduser().resolve()
    if not folder.is_dir():
        raise ValueError(f"--tools-root {root}: not a folder")
    return str(folder)
