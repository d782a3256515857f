"""Where a tool's files and commands are: :class:`ToolIO`, the seam every tool reads, writes, lists and runs
through (llama-server's ``tools_io``), and :class:`LocalIO`, this machine's (its ``tools_io_basic``, with
``--tools-root``'s confinement). :mod:`.isolates` has the others: a container, a host over ssh."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol

from .listing import Kind, Listing, list_entries
from .paths import CallPaths
from .process import Ran, run


class ToolIO(Protocol):
    """A tool's reach for one call. Paths may be relative (to the call's folder); a failure is a None or a
    False for the tool to word (paths leading out of ``--tools-root`` raise :class:`~.paths.OutsideRoot`)."""

    def resolve(self, path: str) -> str:
        """``path`` made absolute against the call's folder, as the tools show it."""
        ...

    def is_file(self, path: str) -> bool: ...

    def is_directory(self, path: str) -> bool: ...

    def file_size(self, path: str) -> int | None: ...

    def read(self, path: str) -> bytes | None: ...

    def write(self, path: str, data: bytes) -> bool:
        """Write ``data`` to ``path``, its folders made first."""
        ...

    def list_entries(self, base: str, *, max_depth: int, kind: Kind) -> Listing | None:
        """The entries under ``base`` (None: not a folder)."""
        ...

    def run(
        self, argv: list[str], *, max_output: int, timeout_s: int, chunk: Callable[[bytes], bool] | None = None
    ) -> Ran:
        """Run ``argv`` in the call's folder (:func:`.process.run`)."""
        ...

    def current_folder(self) -> str:
        """The call's folder as ``get_info`` reports it."""
        ...


class LocalIO:
    """This machine, the server's user: the paths of :class:`~.paths.CallPaths`, the files through ``os``.

    >>> LocalIO(CallPaths("/tmp")).resolve("a/../b")
    '/tmp/b'
    """

    def __init__(self, paths: CallPaths) -> None:
        self.paths = paths

    def resolve(self, path: str) -> str:
        return self.paths.resolve(path)

    def is_file(self, path: str) -> bool:
        return os.path.isfile(self.resolve(path))

    def is_directory(self, path: str) -> bool:
        return os.path.isdir(self.resolve(path))

    def file_size(self, path: str) -> int | None:
        resolved = self.resolve(path)
        try:
            return os.stat(resolved).st_size if os.path.isfile(resolved) else None
        except OSError:
            return None

    def read(self, path: str) -> bytes | None:
        try:
            with open(self.resolve(path), "rb") as file:
                return file.read()
        except OSError:
            return None

    def write(self, path: str, data: bytes) -> bool:
        resolved = self.resolve(path)
        try:
            os.makedirs(os.path.dirname(resolved) or ".", exist_ok=True)
            with open(resolved, "wb") as file:
                file.write(data)
        except OSError:
            return False
        return True

    def list_entries(self, base: str, *, max_depth: int, kind: Kind) -> Listing | None:
        resolved = self.resolve(base)
        return list_entries(resolved, max_depth=max_depth, kind=kind) if os.path.isdir(resolved) else None

    def run(
        self, argv: list[str], *, max_output: int, timeout_s: int, chunk: Callable[[bytes], bool] | None = None
    ) -> Ran:
        return run(argv, cwd=self.paths.folder, max_output=max_output, timeout_s=timeout_s, chunk=chunk)

    def current_folder(self) -> str:
        return self.paths.cwd or self.paths.folder
