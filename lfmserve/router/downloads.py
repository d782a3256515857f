"""The router's downloads (``POST /models``, Ollama's ``/api/pull``) and removals (``DELETE /models``,
``/api/delete``), with llama-server's events on ``/models/sse``.

A download is a process of its own (:mod:`lfmserve.loading.hub_fetch`): ``model_status`` ``downloading`` when it
starts, ``download_progress`` with ``{"progress": {URL: {"done", "total"}}}`` as bytes arrive, then
``download_finished`` (once the router's models include it, so a client that lists them at that event finds it)
or ``download_failed`` (with ``{"error"}``). While it runs, ``/models`` lists the name as ``downloading``;
``/models/unload`` of the name cancels it (the process is killed, and the answer waits for the end, as
llama-server's does). A removal refuses a model that is loaded and one that is not the cache's (an Ollama store
model is ``ollama rm``'s to remove), then publishes ``model_remove``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRequest, NotFound
from ..loading.hub_download import DownloadPlan, remove_cached
from .events import Events
from .pool import Pool

logger = logging.getLogger(__name__)
#: The program a download runs in.
FETCH_MODULE = "lfmserve.loading.hub_fetch"


@dataclass(eq=False)
class Download:
    """One download in progress (or just ended): its files' progress and, once it ended, how."""

    plan: DownloadPlan
    process: asyncio.subprocess.Process
    #: Bytes done and expected, by file URL.
    progress: dict[str, dict[str, int]] = field(default_factory=dict)
    #: None while it runs; True once the router lists the model; False when it failed or was cancelled.
    succeeded: bool | None = None
    error: str | None = None
    cancelled: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    follower: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.plan.name

    async def updates(self) -> AsyncIterator[None]:
        """Once now and once after each change, until it has ended (the last time)."""
        while True:
            changed = self.changed
            yield
            if self.succeeded is not None:
                return
            await changed.wait()

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def entry(self, created: int) -> dict[str, Any]:
        """Its ``/models`` entry, as llama-server lists a model that is downloading."""
        return {
            "id": self.name,
            "aliases": [],
            "tags": [],
            "object": "model",
            "owned_by": "llamacpp",
            "created": created,
            "status": {"value": "downloading", "args": [], "progress": _copy(self.progress)},
            "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
            "source": "cache",
            "can_remove": True,
        }


class Downloads:
    """The downloads in progress, by model name. ``token`` is the hub's (``--hf-token``); ``refresh`` reloads the
    router's models from their sources."""

    def __init__(self, events: Events, pool: Pool, token: str | None, refresh: Callable[[], Awaitable[None]]) -> None:
        self._events, self._pool, self._refresh = events, pool, refresh
        self.token = token
        self._running: dict[str, Download] = {}

    def get(self, name: str) -> Download | None:
        return self._running.get(name)

    def entries(self) -> list[dict[str, Any]]:
        now = int(time.time())
        return [download.entry(now) for download in self._running.values()]

    async def start(self, plan: DownloadPlan) -> Download:
        """Starts downloading ``plan`` (refused when the router has the model, or is already downloading it)."""
        if self._pool.registry.find(plan.name) is not None:
            raise InvalidRequest(f"model '{plan.name}' already exists")
        if plan.name in self._running:
            raise InvalidRequest(f"model '{plan.name}' is already being downloaded")
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", FETCH_MODULE, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        job = {"repo": plan.repo, "files": [f.path for f in plan.files], "token": self.token}
        assert process.stdin is not None
        process.stdin.write(json.dumps(job).encode())
        process.stdin.close()
        download = Download(plan, process)
        self._running[plan.name] = download
        logger.info("downloading %s (%s)", plan.name, ", ".join(f.path for f in plan.files))
        self._events.publish(plan.name, "model_status", {"status": "downloading"})
        download.follower = asyncio.create_task(self._follow(download))
        return download

    async def cancel(self, name: str) -> None:
        """Stops the download of ``name`` and waits for its end (its ``download_failed``)."""
        download = self._running[name]
        download.cancelled = True
        with contextlib.suppress(ProcessLookupError):
            download.process.kill()
        assert download.follower is not None
        await download.follower

    async def close(self) -> None:
        """Cancels every download (the router is stopping)."""
        await asyncio.gather(*(self.cancel(name) for name in list(self._running)))

    async def remove(self, name: str) -> None:
        """``DELETE /models``, ``/api/delete``: a download of ``name`` is cancelled, else the cached model named so
        leaves the cache and the router's models."""
        if name in self._running:
            await self.cancel(name)
            await asyncio.to_thread(remove_cached, name)
        else:
            instance = self._pool.registry.find(name)
            if instance is None:
                raise NotFound(f"model '{name}' not found")
            if instance.spec.source == "ollama":
                raise InvalidRequest(
                    f"model '{name}' is in Ollama's store, which lfmserve never changes: remove it with "
                    f"`ollama rm {name}`"
                )
            if instance.spec.source != "cache":
                raise InvalidRequest(f"model '{name}' is not removable: only a model of the Hugging Face cache is")
            if instance.running:
                raise InvalidRequest(f"model '{name}' is loaded: unload it first (POST /models/unload)")
            name = instance.name
            await asyncio.to_thread(remove_cached, name)
            await self._refresh()
        self._events.publish(name, "model_remove")

    async def _follow(self, download: Download) -> None:
        """Reads the download's reports until its process ends, then says how it ended (whatever went wrong
        here, the download ends: its waiters and a cancel would wait for ever otherwise)."""
        try:
            await self._read_reports(download)
            code = await download.process.wait()
            succeeded = code == 0 and not download.cancelled
            if not succeeded and download.error is None:
                download.error = (
                    "the download was cancelled" if download.cancelled else f"its process exited with {code}"
                )
            if succeeded:
                await self._refresh()
        except Exception as exc:  # a bug, or the sources that cannot be read again: said, not swallowed
            logger.exception("the download of %s failed", download.name)
            with contextlib.suppress(ProcessLookupError):
                download.process.kill()
            succeeded, download.error = False, f"{type(exc).__name__}: {exc}"
        del self._running[download.name]
        download.succeeded = succeeded
        download.notify()
        logger.info("download of %s %s", download.name, "finished" if succeeded else f"failed: {download.error}")
        if succeeded:
            self._events.publish(download.name, "download_finished")
        else:
            self._events.publish(download.name, "download_failed", {"error": download.error})

    async def _read_reports(self, download: Download) -> None:
        assert download.process.stdout is not None
        async for line in download.process.stdout:
            try:
                report = json.loads(line)
            except ValueError:  # not a report: something the hub's library printed
                logger.debug("download of %s: %s", download.name, line.decode(errors="replace").rstrip())
                continue
            if "error" in report:
                download.error = report["error"]
                continue
            counts = {"done": report["done"], "total": report["total"]}
            if download.progress.get(report["url"]) == counts:
                continue  # a file already cached is reported as done by itself too
            download.progress[report["url"]] = counts
            self._events.publish(download.name, "download_progress", {"progress": _copy(download.progress)})
            download.notify()


def _copy(progress: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {url: dict(counts) for url, counts in progress.items()}
