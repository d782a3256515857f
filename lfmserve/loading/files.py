"""Which GGUF files a server loads: ``-m`` or ``-hf`` (downloaded if needed), the projector, the draft model.

Apart from the loader, so that the CLI can check them (a missing file is one line, before anything loads) without
importing the engine and the chat layers: those load on the model's own thread (:mod:`.ahead`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import LfmError
from ..llama.model import model_file_problem
from ..settings import DEFAULT_HF_REPO, Settings, SpeculationSettings
from .hub import resolve_hf_model


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """The GGUF files a server loads: the model, and the multimodal projector if there is one."""

    model: str
    projector: str | None = None
    #: ``draft-simple``'s model (``-md FILE``, or downloaded for ``-hfd``).
    draft: str | None = None


def resolve_model_files(settings: Settings) -> ModelFiles:
    """``-m FILE`` if given (it must exist), else ``-hf`` (default: the seed's LFM2.5 instruct model), with
    ``--mmproj FILE``, or with ``-hf`` the repo's projector unless ``--no-mmproj``."""
    source, media_path = settings.source, settings.media.media_path
    if source.mmproj:
        _check_file(source.mmproj, "projector")
    if media_path and not os.path.isdir(media_path):
        raise LfmError(f"--media-path {media_path} is not a folder")
    draft = resolve_draft_model(settings.speculation, offline=source.offline, token=source.hf_token)
    if source.model:
        _check_file(source.model, "model")
        return ModelFiles(source.model, source.mmproj, draft)
    auto = source.mmproj_auto and not source.mmproj
    path, projector = resolve_hf_model(
        source.hf_repo or DEFAULT_HF_REPO, source.hf_file, projector=auto, offline=source.offline, token=source.hf_token
    )
    return ModelFiles(path, source.mmproj or projector, draft)


def resolve_draft_model(spec: SpeculationSettings, *, offline: bool, token: str | None) -> str | None:
    """``-hfd REPO`` (with ``-md`` naming the file there, as llama-server), else ``-md FILE`` (it must exist)."""
    if spec.spec_draft_hf:
        return resolve_hf_model(spec.spec_draft_hf, spec.spec_draft_model, offline=offline, token=token)[0]
    if spec.spec_draft_model:
        _check_file(spec.spec_draft_model, "draft model")
    return spec.spec_draft_model


def _check_file(path: str, what: str) -> None:
    problem = model_file_problem(path, what)
    if problem is not None:
        raise LfmError(problem)
