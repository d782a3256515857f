"""Where a server's tool calls run: ``--tools-runtime`` and the ``x-tool-runtime`` header, read and checked as
llama-server reads them (``container_runtime_spec``, ``make_tools_io``, ``make_tools_runtime`` in
tools/server/server-tools.cpp at the pin), and the container lfmserve spawns and owns for ``docker:IMAGE``.

- ``docker-container:ID``, ``podman-container:ID``: a running container, attached to (never stopped here).
- ``ssh:TARGET``: a host over ssh (remoting, not isolation).
- ``docker:IMAGE``, ``podman:IMAGE``: ``--tools-runtime`` only; a container spawned at start, spawned again if it
  dies, removed at exit. A header must name a running container.

The header wins over the flag. A malformed value is refused with llama-server's messages before anything runs
(an id or target that starts with ``-`` would be read as an option: ``--privileged``, ``-oProxyCommand=...``),
and so is a program that is not on PATH; a refused call is never run on this machine instead. ``--tools-root``
confines this machine's paths only, so a server with it refuses every runtime.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from .isolates import ContainerIO, IsolateIO, SshIO
from .paths import CallPaths
from .process import kill
from .toolio import LocalIO, ToolIO

logger = logging.getLogger(__name__)

ENGINES = ("docker", "podman")
_CONTAINER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SSH_TARGET = re.compile(r"[A-Za-z0-9._@][A-Za-z0-9._@-]*")
#: How long a spawned container may take to report its id (llama-server's 100 polls of 100 ms), and to stop.
START_S = 10.0
STOP_S = 10.0


class RuntimeRefused(ValueError):
    """A runtime that cannot be used: a 500 for a call, the one error line at start."""


@dataclass(frozen=True, slots=True)
class RuntimeSpec:
    """A runtime as written (``text``): its program, and the image, container id or ssh target it names."""

    text: str
    program: str
    value: str
    attach: bool  # False: an image to spawn a container of


def parse(text: str) -> RuntimeSpec:
    """Read a runtime; :class:`RuntimeRefused` with llama-server's message for a malformed one.

    >>> parse("podman-container:box")
    RuntimeSpec(text='podman-container:box', program='podman', value='box', attach=True)
    """
    for engine in ENGINES:
        if text.startswith(f"{engine}-container:"):
            container = text.partition(":")[2]
            if not _CONTAINER_ID.fullmatch(container):
                raise RuntimeRefused(f"invalid container id: {container}")
            return RuntimeSpec(text, engine, container, True)
        if text.startswith(f"{engine}:"):
            return RuntimeSpec(text, engine, text.partition(":")[2], False)
    if text.startswith("ssh:"):
        target = text[4:]
        if not _SSH_TARGET.fullmatch(target):
            raise RuntimeRefused(f"invalid ssh target: {target}")
        return RuntimeSpec(text, "ssh", target, True)
    raise RuntimeRefused(f"unknown tool runtime: {text}")


def check_flag(text: str) -> None:
    """``--tools-runtime`` as written, and its program on PATH, checked when parsed: before any model loads."""
    spec = parse(text)
    if not spec.attach and not spec.value:
        raise RuntimeRefused(f"--tools-runtime {spec.program}:<image> requires an image name")
    _require_program(spec)


def _require_program(spec: RuntimeSpec) -> None:
    if shutil.which(spec.program) is None:
        raise RuntimeRefused(f"tool runtime {spec.text}: {spec.program} was not found on PATH")


def _isolate(spec: RuntimeSpec, cwd: str) -> IsolateIO:
    if not spec.attach:  # spawning belongs to the runtime that owns the container: a call only attaches
        raise RuntimeRefused(f"tool runtime must name a running container: {spec.text}")
    _require_program(spec)
    if spec.program == "ssh":
        return SshIO(spec.value, cwd)
    return ContainerIO(spec.program, spec.value, cwd)


class ToolRuntime:
    """Where one server's calls run: this machine (within ``--tools-root``), or the isolate of the call's header,
    else of ``--tools-runtime``. Made at start, where a missing program or a container that does not start is
    the start's error; :meth:`close` at exit removes the container it spawned.

    >>> ToolRuntime().io("/srv").resolve("../notes.txt")  # this machine's paths, normalized
    '/notes.txt'
    """

    def __init__(self, root: str | None = None, runtime: str | None = None) -> None:
        self.root = root
        self._attached = ""
        self._owned: OwnedContainer | None = None
        if runtime:
            spec = parse(runtime)
            _require_program(spec)
            if spec.attach:
                self._attached = runtime
            else:
                self._owned = OwnedContainer(spec.program, spec.value)

    def io(self, cwd: str = "", header: str = "") -> ToolIO:
        """The reach of a call with these ``x-tool-cwd`` and ``x-tool-runtime`` headers."""
        text = header or (self._owned.spec() if self._owned is not None else self._attached)
        if not text:
            return LocalIO(CallPaths(cwd, self.root))
        spec = parse(text)
        if self.root is not None:
            raise RuntimeRefused(f"tool runtime {text}: --tools-root keeps the tools on this machine, in {self.root}")
        return _isolate(spec, cwd)

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()


class OwnedContainer:
    """The container of ``--tools-runtime ENGINE:IMAGE``: ``ENGINE run --rm -i --cidfile FILE IMAGE sh``, whose
    shell waits on the stdin held open here. Closing it ends the shell and ``--rm`` removes the container (if
    lfmserve dies, its end of the pipe closes all the same); one that dies on its own is spawned again."""

    def __init__(self, engine: str, image: str) -> None:
        self.engine = engine
        self.image = image
        self.container = ""
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._closed = False
        self._spawn()

    def spec(self) -> str:
        """The runtime a call attaches to, ``ENGINE-container:ID``, of a container running now."""
        with self._lock:
            if self._closed:
                raise RuntimeRefused("the tools runtime is stopped: the server is shutting down")
            if self._process is None or self._process.poll() is not None:
                logger.warning('%s tools runtime container "%s" died, respawning', self.engine, self.container)
                if self._process is not None:
                    _stop(self._process)
                    self._process = None
                self._spawn()
            return f"{self.engine}-container:{self.container}"

    def close(self) -> None:
        """Stop the container (called again at exit after a drain: then nothing to do)."""
        with self._lock:
            process, self._process, self._closed = self._process, None, True
        if process is not None:
            _stop(process)

    def _spawn(self) -> None:
        folder = tempfile.mkdtemp(prefix="lfmserve-tools-runtime-")
        cidfile = os.path.join(folder, "cid")  # a new name: the engine refuses to write over one
        argv = [self.engine, "run", "--rm", "-i", "--cidfile", cidfile, self.image, "sh"]
        try:
            try:  # its own process group: a Ctrl-C at the terminal leaves the stop to close()
                process = subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True
                )
            except OSError as exc:
                raise RuntimeRefused(self._failed("")) from exc
            try:
                self.container = self._container_id(process, cidfile)
            except RuntimeRefused:
                _stop(process)
                raise
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self._process = process
        logger.info("tools run in %s container %s (image %s)", self.engine, self.container, self.image)

    def _container_id(self, process: subprocess.Popen[bytes], cidfile: str) -> str:
        """The id the engine writes once the container runs, within :data:`START_S`."""
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            try:
                with open(cidfile) as file:
                    container = file.readline().strip()
            except OSError:
                container = ""
            if container:
                return container
            if process.poll() is not None:  # no such image, no daemon: the engine said why on stderr
                raise RuntimeRefused(self._failed(f": it exited with status {process.returncode}"))
            time.sleep(0.1)
        kill(process)
        raise RuntimeRefused(f"timed out waiting for {self.engine} container to start (image: {self.image})")

    def _failed(self, why: str) -> str:
        return f"failed to spawn {self.engine} container for tools runtime (image: {self.image}){why}"


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End the engine's client: its stdin closed (the container's shell ends, ``--rm`` removes it), then waited
    for; killed if it does not end within :data:`STOP_S`."""
    try:
        assert process.stdin is not None
        process.stdin.close()
    except OSError:
        pass
    try:
        process.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        kill(process)
        process.wait()
