"""Ollama's ``/api/pull`` of a Hugging Face model on the router: a name as Ollama gives one (``hf.co/org/repo:QUANT``)
is downloaded as ``POST /models`` downloads it (:mod:`.downloads`), and the progress is written as Ollama writes
it: ``pulling manifest``, a ``pulling DIGEST`` line with ``digest``, ``total`` and ``completed`` for each report
of a file, ``verifying sha256 digest``, ``writing manifest``, ``success`` (or a last ``{"error"}`` line). With
``stream: false`` the one answer comes at the end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import JSONResponse, Response

from ..api.ndjson import ndjson
from ..errors import LfmError
from ..loading.hub import DEFAULT_QUANT
from ..loading.hub_download import RepoFile
from .downloads import Download
from .preset import canonical_name

#: How Ollama names a model of the Hugging Face hub.
_HUB_PREFIXES = ("hf.co/", "huggingface.co/")


def hub_name(requested: str) -> str | None:
    """``hf.co/org/repo:q4_k_m`` -> ``org/repo:Q4_K_M``, the router's name for it (no tag, or ``latest``: Q4_K_M,
    as Ollama picks it too); None for a name that is not the hub's."""
    for prefix in _HUB_PREFIXES:
        if requested.lower().startswith(prefix):
            repo, _, tag = requested[len(prefix) :].partition(":")
            return canonical_name(f"{repo}:{DEFAULT_QUANT if tag in ('', 'latest') else tag}")
    return None


async def pull_answer(download: Download, *, stream: bool) -> Response:
    if stream:
        return ndjson(_progress(download))
    return await _final(download)


async def _progress(download: Download) -> AsyncIterator[dict[str, Any]]:
    yield {"status": "pulling manifest"}
    sent: dict[str, int] = {}
    async for _ in download.updates():
        for file in download.plan.files:
            counts = download.progress.get(file.url)
            if counts is not None and sent.get(file.url) != counts["done"]:
                sent[file.url] = counts["done"]
                yield _layer(file, counts)
    if not download.succeeded:
        raise LfmError(download.error or "the download failed")
    for status in ("verifying sha256 digest", "writing manifest", "success"):
        yield {"status": status}


async def _final(download: Download) -> Response:
    async for _ in download.updates():
        pass
    if not download.succeeded:
        return JSONResponse({"error": download.error or "the download failed"}, status_code=500)
    return JSONResponse({"status": "success"})


def _layer(file: RepoFile, counts: dict[str, int]) -> dict[str, Any]:
    """A file's progress line: Ollama's layer, named by its digest (the file's path for one the hub gives no
    SHA-256 for)."""
    line: dict[str, Any] = {"status": f"pulling {file.sha256[:12] if file.sha256 else file.path}"}
    if file.sha256:
        line["digest"] = f"sha256:{file.sha256}"
    return line | {"total": counts["total"], "completed": counts["done"]}
