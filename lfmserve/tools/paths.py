"""Where a tool call's paths lead: relative to the call's folder (``x-tool-cwd``, else the server's), ``~`` the
home folder, ``..`` resolved in the text as llama-server does (``lexically_normal``). With ``--tools-root`` (not
in llama-server) every path must stay inside the root once symlinks are followed: ``../``, an absolute path
elsewhere, or a link that leads out is refused, and the call's folder defaults to the root."""

from __future__ import annotations

import os
from dataclasses import dataclass


class OutsideRoot(ValueError):
    """A path that leads out of ``--tools-root``."""


@dataclass(frozen=True, slots=True)
class CallPaths:
    """How one call's paths resolve: its folder (``""``: the server's), and the root they must stay in."""

    cwd: str = ""
    root: str | None = None

    @property
    def folder(self) -> str:
        """The folder the call's relative paths and its commands start from: ``cwd`` (relative to the root, or
        to the server's folder), else the root, else the server's folder; checked against the root."""
        base = self.root if self.root is not None else os.getcwd()
        return self._checked(_absolute(self.cwd, base)) if self.cwd else base

    def resolve(self, path: str) -> str:
        """``path`` made absolute and normal; :class:`OutsideRoot` if it leaves the root."""
        return self._checked(_absolute(path, self.folder))

    def _checked(self, path: str) -> str:
        if self.root is not None:
            _check_inside(path, self.root)
        return path


def _absolute(path: str, base: str) -> str:
    """``path`` with ``~`` the home folder, joined onto ``base`` unless absolute, ``..`` resolved in the text."""
    home = os.environ.get("HOME", "")
    if home and (path == "~" or path.startswith(("~/", "~\\"))):
        path = home + path[1:]
    normal = os.path.normpath(os.path.join(base, path))
    if normal.startswith("//"):  # POSIX keeps a leading double slash; llama.cpp's normal form does not
        normal = "/" + normal.lstrip("/")
    return normal


def _check_inside(path: str, root: str) -> None:
    """``path`` and whatever its links lead to are inside ``root`` (a path not there yet: its folder's)."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if not (real == real_root or real.startswith(real_root.rstrip("/") + "/")):
        raise OutsideRoot(f"{path} is outside the tools root {root}")
