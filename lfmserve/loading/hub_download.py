"""A model downloaded into the Hugging Face cache while a router serves (``POST /models``, Ollama's
``/api/pull``), and one removed from it (``DELETE /models``, ``/api/delete``).

The files a name stands for are the ones ``-hf`` picks (the quant's GGUF, every part of a split one, and the
nearest projector), found with one listing of the repo, which also checks the name before anything is started.
The download itself runs in a process of its own (:mod:`.hub_fetch`), so that a cancel stops it at once. Removing
a quant takes its entries out of every snapshot of the repo, and each blob no other entry still points to, as
llama.cpp's ``common_download_remove`` does; a projector another quant may use stays.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..errors import InvalidRequest, LfmError, NotFound, Unavailable
from .hub import cache_dir, hub_reachable, pick_gguf, pick_mmproj, quant_tag, split_spec

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RepoFile:
    """One file to fetch: its path in the repo, its URL (progress is reported by it, as llama-server does), its
    size and, for a file kept in LFS (every GGUF on the hub), its SHA-256 (Ollama's clients show it as the
    layer's digest)."""

    path: str
    url: str
    size: int
    sha256: str | None


@dataclass(frozen=True, slots=True)
class DownloadPlan:
    """A model to download: its router name (``org/repo:QUANT``, as the cache lists it) and its files."""

    name: str
    repo: str
    files: tuple[RepoFile, ...]


def plan_download(spec: str, token: str | None) -> DownloadPlan:
    """The files of ``org/repo[:QUANT]`` (blocking: one request to the hub). A name that is no repo's is
    :class:`InvalidRequest`; a repo the hub does not have (or refuses) or a quant it does not hold, :class:`NotFound`;
    a hub that cannot be reached, :class:`Unavailable` at once (huggingface_hub would retry for half a minute)."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError
    from huggingface_hub.hf_api import RepoFile as HubFile

    try:
        repo, quant = split_spec(spec)
    except NotFound as exc:  # a name that is no repo's: the client's mistake
        raise InvalidRequest(exc.message) from exc
    try:  # the call checks the repo id; the listing is fetched as it is read
        tree = huggingface_hub.HfApi().list_repo_tree(repo, recursive=True, token=token)
    except HFValidationError as exc:  # characters a repo id cannot have
        raise InvalidRequest(f"invalid Hugging Face repo '{spec}': {exc}") from exc
    if not hub_reachable():
        raise Unavailable(f"the hub at {constants.ENDPOINT} cannot be reached to list {repo}")
    try:
        listing = {entry.path: entry for entry in tree if isinstance(entry, HubFile)}
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403, 404):
            raise NotFound(f"Hugging Face repo not found: {repo} ({status})") from exc
        raise LfmError(f"the hub failed to list {repo}: {exc}") from exc
    except Exception as exc:  # the hub went away meanwhile: whatever the HTTP stack raises (httpx's are no OSError)
        raise Unavailable(f"cannot reach the hub to list {repo}: {exc}") from exc
    parts = pick_gguf(listing, quant)
    projector = pick_mmproj(listing, parts[0])
    chosen = [listing[path] for path in (*parts, *([projector] if projector else []))]
    files = tuple(
        RepoFile(f.path, huggingface_hub.hf_hub_url(repo, f.path), f.size, f.lfs.sha256 if f.lfs else None)
        for f in chosen
    )
    return DownloadPlan(f"{repo}:{quant}", repo, files)


def remove_cached(name: str) -> bool:
    """Takes the quant ``org/repo:QUANT`` out of the cache (blocking); False when it held none of its files."""
    from huggingface_hub import constants, scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    repo, quant = split_spec(name)
    try:
        cache = scan_cache_dir(cache_dir() or constants.HF_HUB_CACHE)
    except CacheNotFound:
        return False
    entries = [
        (file.file_path, file.blob_path)
        for cached in cache.repos
        if cached.repo_id == repo and cached.repo_type == "model"
        for revision in cached.revisions
        for file in revision.files
    ]
    chosen = [
        (path, blob)
        for path, blob in entries
        if path.name.lower().endswith(".gguf") and "mmproj" not in path.name.lower() and quant_tag(path.name) == quant
    ]
    kept = {blob for path, blob in entries if (path, blob) not in chosen}
    for path, blob in chosen:
        path.unlink(missing_ok=True)
        if blob not in kept:
            blob.unlink(missing_ok=True)
    logger.info("removed %s from the Hugging Face cache (%d files)", name, len(chosen))
    return bool(chosen)
