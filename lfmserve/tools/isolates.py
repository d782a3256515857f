"""The tools' reach inside an isolate, each operation one command run there, built as llama-server builds it
(``tools_io_isolate``, ``tools_io_container``, ``tools_io_ssh`` in tools/server/server-tools.cpp at the pin):
``<engine> exec [-i] ID ARGV...`` for a running container, ``ssh -o ... [-n] TARGET 'QUOTED ARGV'`` for a host.

The isolate must be POSIX (``sh``, ``cat``, ``wc``, ``mkdir``, ``dirname``, ``find``, ``timeout``; ``git`` for
``.gitignore``). Its paths are its own: a relative one joins the call's folder (``x-tool-cwd``) as text, an
absolute one is taken as it is, and ``--tools-root`` does not apply (:mod:`.runtime` refuses the two together).
Killing ``docker`` or ``ssh`` here leaves the command running there, so a command is wrapped in the isolate's
``timeout``, and killed here 5 s later."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable

from .listing import GIT_OUTPUT_BYTES, JUNK, Entry, Kind, Listing, within
from .process import Ran, run

#: The bound of a helper command (a test, a size, a listing, a read, a write), and what a read may return.
HELPER_TIMEOUT_S = 15
READ_MAX_BYTES = 64 << 20
#: The ``find`` passes a listing makes: whether each lists folders (True) or files.
_FINDS: dict[Kind, tuple[bool, ...]] = {"dir": (True,), "file": (False,), "all": (True, False)}
#: What ``wc -c`` prints: a count, after blanks on some systems (busybox).
_COUNT = re.compile(rb"\s*(\d+)")


class IsolateIO(ABC):
    """The operations, each a command (``inner``, a complete POSIX argv) that :meth:`wrap` makes run there."""

    def __init__(self, cwd: str = "") -> None:
        self.cwd = cwd

    @abstractmethod
    def wrap(self, inner: list[str], *, stdin: bool) -> list[str]:
        """The argv, run here, that runs ``inner`` in the isolate (``stdin``: it reads what this side writes)."""

    def resolve(self, path: str) -> str:
        return path if not self.cwd or path.startswith("/") else f"{self.cwd}/{path}"

    def is_file(self, path: str) -> bool:
        return self._test("-f", path)

    def is_directory(self, path: str) -> bool:
        return self._test("-d", path)

    def _test(self, flag: str, path: str) -> bool:
        ran = self._helper(["sh", "-c", f'[ {flag} "$1" ]', "_", self.resolve(path)], 4096)
        return _succeeded(ran)

    def file_size(self, path: str) -> int | None:
        ran = self._helper(["sh", "-c", 'wc -c < "$1"', "_", self.resolve(path)], 64)
        count = _COUNT.match(ran.output)
        return int(count[1]) if _succeeded(ran) and count else None

    def read(self, path: str) -> bytes | None:
        # stderr apart: it must not be spliced into the file's bytes; a file past the bound is not read at all
        ran = self._helper(["cat", "--", self.resolve(path)], READ_MAX_BYTES, stderr=False)
        return ran.output if _succeeded(ran) and not ran.truncated else None

    def write(self, path: str, data: bytes) -> bool:
        # the content on stdin: no argv for the far side to re-parse, no temporary file here
        inner = ["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "_", self.resolve(path)]
        ran = run(self.wrap(inner, stdin=True), max_output=4096, timeout_s=HELPER_TIMEOUT_S, stdin=data)
        return _succeeded(ran)

    def list_entries(self, base: str, *, max_depth: int, kind: Kind) -> Listing | None:
        """``git ls-files`` for files when ``base`` is in a repository, else ``find`` (folders, then files)."""
        if not self.is_directory(base):
            return None
        absolute = self.resolve(base)
        if kind == "file":
            script = 'cd "$1" && git ls-files --cached --others --exclude-standard'
            ran = self._helper(["sh", "-c", script, "_", absolute], GIT_OUTPUT_BYTES)
            if _succeeded(ran):
                files = [path for path in _lines(ran.output, False) if within(path, max_depth)]
                return Listing([Entry(path, False) for path in files], False)
        entries: list[Entry] = []
        truncated = False
        for is_dir in _FINDS[kind]:
            ran = self._helper(["sh", "-c", _find_script(max_depth, is_dir), "_", absolute], GIT_OUTPUT_BYTES)
            truncated = truncated or ran.timed_out or ran.truncated
            entries += [Entry(path, is_dir) for path in _lines(ran.output, True)]
        return Listing(entries, truncated)

    def run(
        self, argv: list[str], *, max_output: int, timeout_s: int, chunk: Callable[[bytes], bool] | None = None
    ) -> Ran:
        inner = ["timeout", f"{timeout_s}s", *argv]
        if self.cwd:  # no transport has docker's -w, so the command changes folder itself (127: could not run)
            inner = ["sh", "-c", 'cd "$1" || exit 127; shift; exec "$@"', "_", self.cwd, *inner]
        return run(self.wrap(inner, stdin=True), max_output=max_output, timeout_s=timeout_s + 5, chunk=chunk, stdin=b"")

    def current_folder(self) -> str:
        if self.cwd:
            return self.cwd
        ran = self.run(["pwd"], max_output=4096, timeout_s=5)
        return ran.output.decode(errors="replace").strip() if _succeeded(ran) else "unknown"

    def _helper(self, inner: list[str], max_output: int, *, stderr: bool = True) -> Ran:
        return run(self.wrap(inner, stdin=False), max_output=max_output, timeout_s=HELPER_TIMEOUT_S, stderr=stderr)


class ContainerIO(IsolateIO):
    """A running container, through ``<engine> exec`` (docker and podman take the same verbs and order).

    >>> ContainerIO("podman", "box").wrap(["cat", "--", "/f"], stdin=False)
    ['podman', 'exec', 'box', 'cat', '--', '/f']
    """

    def __init__(self, engine: str, container: str, cwd: str = "") -> None:
        super().__init__(cwd)
        self.engine = engine
        self.container = container

    def wrap(self, inner: list[str], *, stdin: bool) -> list[str]:
        return [self.engine, "exec", *(["-i"] if stdin else []), self.container, *inner]


class SshIO(IsolateIO):
    """A host over ssh: remoting, not isolation (the tools may do whatever the target's account may). Key-based
    and non-interactive (a prompt would hang the call), the host key trusted beforehand; the remote shell
    re-parses the command, so the argv travels as one quoted word.

    >>> SshIO("me@host").wrap(["cat", "--", "it's"], stdin=False)[-3:]
    ['-n', 'me@host', "'cat' '--' 'it'\\\\''s'"]
    """

    OPTIONS = (
        "BatchMode=yes", "PasswordAuthentication=no", "KbdInteractiveAuthentication=no", "StrictHostKeyChecking=yes",
    )  # fmt: skip

    def __init__(self, target: str, cwd: str = "") -> None:
        super().__init__(cwd)
        self.target = target

    def wrap(self, inner: list[str], *, stdin: bool) -> list[str]:
        options = [word for option in self.OPTIONS for word in ("-o", option)]
        return ["ssh", *options, *([] if stdin else ["-n"]), self.target, quote_join(inner)]


def quote_join(argv: list[str]) -> str:
    """``argv`` as one line a POSIX shell parses back into exactly ``argv`` (each word single-quoted; a quote
    inside closes, escapes and reopens)."""
    return " ".join("'" + word.replace("'", "'\\''") + "'" for word in argv)


def _find_script(max_depth: int, dirs: bool) -> str:
    """One ``find`` in the isolate: junk folders listed (folders) but never entered; ``-mindepth``/``-maxdepth``
    work in busybox as in GNU."""
    prune = " -o ".join(f"-name {name}" for name in JUNK)
    depth = f" -maxdepth {max_depth}" if max_depth > 0 else ""
    select = " -print -o -type d -print" if dirs else " -o -type f -print"
    return f'cd "$1" && find . -mindepth 1{depth} \\( {prune} \\) -prune{select}'


def _lines(output: bytes, strip_dot_slash: bool) -> list[str]:
    lines = []
    for line in output.decode(errors="replace").split("\n"):
        line = line.removesuffix("\r")
        if strip_dot_slash:
            line = line.removeprefix("./")
        if line:
            lines.append(line.replace("\\", "/"))
    return lines


def _succeeded(ran: Ran) -> bool:
    return ran.exit_code == 0 and not ran.timed_out
