"""LM Studio's models folder as a source of the router's models, read in place and never written, and the
``<publisher>/<repo>/<file>.gguf`` layout it keeps, which ``--models-dir`` reads too.

The folder (``--models-lmstudio DIR``, else ``~/.lmstudio/models`` or the older ``~/.cache/lm-studio/models`` when
there; ``--no-models-lmstudio``: none) holds a folder per publisher and in it a folder per repo, as LM Studio keeps
what it downloads from Hugging Face. A repo's models are its GGUF files: a file is one, the parts of a split GGUF
(``-00001-of-00003.gguf`` ...) together are one, and a file whose name holds ``mmproj`` is the projector of every
model of the repo (the nearest in quantisation when there are several, as llama-server picks). A repo of one model
names it ``<publisher>/<repo>``; a repo of several names each ``<publisher>/<repo>:<QUANT>``, the quant read from
its file name as the Hugging Face cache's models are named (``LiquidAI/LFM2-350M-GGUF:Q4_K_M``). Anything else (a
loose file, a hidden folder, a folder without GGUFs such as an MLX model's, a split GGUF with a part missing, a
folder that cannot be read) is passed over, never stopping the router.

Example::

    ~/.lmstudio/models/LiquidAI/LFM2-VL-450M-GGUF/LFM2-VL-450M-Q4_0.gguf    LiquidAI/LFM2-VL-450M-GGUF:Q4_0
                                                  LFM2-VL-450M-Q8_0.gguf    LiquidAI/LFM2-VL-450M-GGUF:Q8_0
                                                  mmproj-LFM2-VL-450M-F16.gguf  (the projector of both)
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from ..gguf_split import split_part, split_paths
from ..loading.hub import pick_mmproj, quant_tag
from ..settings import RouterSettings

logger = logging.getLogger(__name__)
#: Where LM Studio keeps its models: its folder today, then the one of its older releases.
DEFAULT_FOLDERS = ("~/.lmstudio/models", "~/.cache/lm-studio/models")


@dataclass(frozen=True, slots=True)
class RepoModel:
    """One model of a repo folder: its name, its weights (the first part first) and its projector."""

    name: str
    files: tuple[str, ...]
    projector: str | None = None

    @property
    def flags(self) -> dict[str, str]:
        """Its child's flags, as a preset section would write them."""
        return {"model": self.files[0], **({"mmproj": self.projector} if self.projector else {})}


def studio_folder(router: RouterSettings) -> str | None:
    """The folder the router reads: ``--models-lmstudio``, else the first default folder that is there; None when
    off or there is none."""
    if not router.models_lmstudio_enabled:
        return None
    if router.models_lmstudio:
        return router.models_lmstudio
    for folder in DEFAULT_FOLDERS:
        path = os.path.expanduser(folder)
        if os.path.isdir(path):
            return path
    return None


def scan_studio(folder: str) -> list[RepoModel]:
    """Every model of LM Studio's folder at ``folder``, by publisher, repo and name; a folder that is not there
    lists none (with a warning)."""
    if not os.path.isdir(folder):
        logger.warning("LM Studio's models folder %s is not a folder: none of its models are listed", folder)
        return []
    found = [model for publisher, path in _folders(folder) for model in scan_publisher(path, publisher)]
    logger.info("LM Studio's models folder %s: %d models", folder, len(found))
    return found


def scan_publisher(path: str, publisher: str) -> list[RepoModel]:
    """The models of a publisher's folder: those of each of its repo folders, named ``<publisher>/<repo>``."""
    return [model for repo, folder in _folders(path) for model in scan_repo(folder, f"{publisher}/{repo}")]


def scan_repo(path: str, name: str) -> list[RepoModel]:
    """A repo folder's models, named ``name`` or ``name:QUANT`` (the module's rules); a second file of a quant
    already named is left out with a warning."""
    ggufs = [file for file in _listing(path) if file.endswith(".gguf") and os.path.isfile(os.path.join(path, file))]
    projectors = [file for file in ggufs if "mmproj" in file]
    parts: dict[str, list[str]] = {}  # a model's files, by their name without the part number
    for file in ggufs:
        if file not in projectors:
            part = split_part(file)
            parts.setdefault(part.prefix if part else file, []).append(file)
    models = [files for files in parts.values() if _whole(path, files)]
    found: dict[str, RepoModel] = {}
    for files in models:
        tag = quant_tag(files[0]) if len(models) > 1 else ""
        model = f"{name}:{tag}" if tag else name
        if model in found:
            logger.warning(
                "the GGUF %s is left out: %s is already %s",
                os.path.join(path, files[0]),
                model,
                found[model].files[0],
            )
            continue
        projector = pick_mmproj(projectors, files[0])
        weights = tuple(os.path.join(path, file) for file in files)
        found[model] = RepoModel(model, weights, os.path.join(path, projector) if projector else None)
    return list(found.values())


def _whole(path: str, files: list[str]) -> bool:
    """Whether ``files`` (sorted) are a model: one file, or each part of a split GGUF (else a warning)."""
    part = split_part(files[0])
    if part is None or files == split_paths(part.prefix, part.count):
        return True
    first = os.path.join(path, files[0])
    logger.warning("the split GGUF %s is left out: it does not have each of its %d parts", first, part.count)
    return False


def _folders(path: str) -> list[tuple[str, str]]:
    """The sub-folders of ``path`` (name, path), sorted; hidden ones (``.locks``...) passed over."""
    return [
        (name, os.path.join(path, name))
        for name in _listing(path)
        if not name.startswith(".") and os.path.isdir(os.path.join(path, name))
    ]


def _listing(path: str) -> list[str]:
    """The names in the folder ``path``, sorted; none (with a warning) when it cannot be read."""
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        logger.warning("the folder %s cannot be read, so none of its models are listed: %s", path, exc)
        return []
