"""``-hf repo[:QUANT]``: find the quant's GGUF in a Hugging Face repo and download it (or use the cache).

Uses huggingface_hub, so ``HF_ENDPOINT``, ``HF_TOKEN`` (read into ``--hf-token``), ``HF_HOME`` and
``HF_HUB_OFFLINE`` work as they do everywhere else (``LLAMA_CACHE``, as in llama.cpp, names the cache folder),
downloads show a progress bar, and a file downloaded once is served from the cache when the hub cannot be
reached. huggingface_hub is imported by the first download or cache look-up, not with this module: a server given
``-m FILE`` never loads it.

Example::

    path = resolve_hf_model("LiquidAI/LFM2.5-1.2B-Instruct-GGUF:Q4_K_M")
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from ..errors import LfmError, NotFound
from ..gguf_split import split_part

logger = logging.getLogger(__name__)

DEFAULT_QUANT = "Q4_K_M"
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)


def cache_dir() -> str | None:
    """Where ``-hf`` files go: ``LLAMA_CACHE`` when set (llama.cpp looks there first, in the same layout), else
    huggingface_hub's cache (``HF_HUB_CACHE``, ``HF_HOME``...)."""
    return os.environ.get("LLAMA_CACHE") or None


def split_spec(spec: str) -> tuple[str, str]:
    """``"org/repo:q8_0"`` -> ``("org/repo", "Q8_0")``; the quant defaults to Q4_K_M."""
    repo, _, quant = spec.partition(":")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise NotFound(f"invalid Hugging Face repo '{spec}': expected owner/name[:quant]")
    return repo, (quant or DEFAULT_QUANT).upper()


def pick_gguf(files: Iterable[str], quant: str) -> list[str]:
    """The repo files that make up the quant's model: one file, or every part of a split GGUF."""
    ggufs = sorted(f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower())
    pattern = re.compile(rf"(^|[-._/]){re.escape(quant)}([-._]|$)", re.IGNORECASE)
    matches = [f for f in ggufs if pattern.search(os.path.basename(f))]
    if not matches:
        raise NotFound(f"no {quant} GGUF in the repo (found: {', '.join(ggufs) or 'no GGUF files'})")
    first = matches[0]
    part = split_part(first)
    if part is None:
        return [first]
    return [f for f in matches if f.startswith(part.prefix) and split_part(f)]


def quant_tag(path: str) -> str:
    """A GGUF's quantisation tag, as llama-server reads it from the name: ``LFM2-350M-q4_k_m.gguf`` -> ``Q4_K_M``
    (the first part's for a split GGUF; ``""`` for none)."""
    part = split_part(path)
    stem = part.prefix if part else path
    stem = stem[: -len(".gguf")] if stem.lower().endswith(".gguf") else stem
    tag = _TAG.search(stem)
    return tag.group(1).upper() if tag else ""


def quant_bits(path: str) -> int:
    """The bits of a GGUF's quantisation tag, as llama-server reads them: Q4_K_M -> 4, F16 -> 16, none -> 0."""
    digits = re.search(r"\d+", quant_tag(path))
    return int(digits.group()) if digits else 0


def pick_mmproj(files: Iterable[str], model_file: str) -> str | None:
    """The repo's projector for ``model_file`` (llama-server's ``find_best_mmproj``): a ``.gguf`` with
    ``mmproj`` in its path, in the model's folder or one above it, the deepest first, then the nearest
    quantisation to the model's."""
    model_dirs = model_file.split("/")[:-1]
    bits = quant_bits(model_file)
    best: tuple[int, int, str] | None = None
    for path in files:
        if not path.endswith(".gguf") or "mmproj" not in path:
            continue
        dirs = path.split("/")[:-1]
        if dirs != model_dirs[: len(dirs)]:
            continue
        rank = (-len(dirs), abs(quant_bits(path) - bits), path)
        if best is None or rank[:2] < best[:2]:
            best = rank
    return None if best is None else best[2]


def resolve_hf_model(
    spec: str, hf_file: str | None = None, *, projector: bool = False, offline: bool = False, token: str | None = None
) -> tuple[str, str | None]:
    """Local paths of the model file (the first part of a split GGUF) and, when asked and the repo has one,
    of its projector, downloading what is missing (``offline``: from the cache only, as llama-server's
    ``--offline``; ``token``: ``--hf-token``, else huggingface_hub's own).

    When the hub's host does not answer and the files are cached, the cache is used at once instead of
    waiting through huggingface_hub's retries.
    """
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError

    repo, quant = split_spec(spec)
    if offline:
        return _from_cache(repo, quant, hf_file, projector, why="(--offline)")
    if not hub_reachable():
        try:
            cached = _from_cache(repo, quant, hf_file, projector)
            logger.warning("the hub at %s cannot be reached; using the cached %s", constants.ENDPOINT, cached[0])
            return cached
        except NotFound:
            pass  # not cached: try the hub anyway (a proxy may reach it)
    try:
        listing = huggingface_hub.list_repo_files(repo, token=token) if projector or not hf_file else []
        files = [hf_file] if hf_file else pick_gguf(listing, quant)
        mmproj = pick_mmproj(listing, files[0]) if projector else None
        paths = [huggingface_hub.hf_hub_download(repo, f, cache_dir=cache_dir(), token=token) for f in files]
        if mmproj is None:
            return paths[0], None
        return paths[0], huggingface_hub.hf_hub_download(repo, mmproj, cache_dir=cache_dir(), token=token)
    except LfmError:
        raise
    except HfHubHTTPError as exc:
        if exc.response is not None and exc.response.status_code in (401, 403, 404):
            raise NotFound(f"Hugging Face repo or file not found: {repo} ({exc.response.status_code})") from exc
        logger.warning("the hub failed (%s); looking in the local cache", exc)
    except Exception as exc:  # offline mode, DNS, refused connections: whatever the HTTP stack raises
        logger.warning("cannot reach the hub (%s); looking in the local cache", exc)
    return _from_cache(repo, quant, hf_file, projector)


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the hub's host accepts a TCP connection (False in offline mode)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def _from_cache(
    repo: str, quant: str, hf_file: str | None, projector: bool, *, why: str = "and the hub cannot be reached"
) -> tuple[str, str | None]:
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        snapshot = huggingface_hub.snapshot_download(repo, local_files_only=True, cache_dir=cache_dir())
    except LocalEntryNotFoundError as exc:
        raise NotFound(f"{repo} is not in the local cache {why}") from exc
    cached = [
        os.path.relpath(os.path.join(root, name), snapshot) for root, _, names in os.walk(snapshot) for name in names
    ]
    files = [hf_file] if hf_file else pick_gguf(cached, quant)
    paths = [os.path.join(snapshot, f) for f in files]
    if not all(os.path.exists(p) for p in paths):
        raise NotFound(f"{files[0]} of {repo} is not in the local cache {why}")
    mmproj = pick_mmproj(cached, files[0]) if projector else None
    return paths[0], os.path.join(snapshot, mmproj) if mmproj else None
