"""Turns :class:`Settings` and a GGUF path into a ready :class:`Serving`: model, engine, template, defaults.

Shared by the server (which runs it in a background thread while ``/health`` answers 503) and by
tests. The startup log names the model, its context and where each sampling default came from.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from ..chat.media import process_media_marker
from ..chat.serving import Serving
from ..chat.template import CHATML_TEMPLATE, BuiltinTemplate, ChatFormatter, ChatTemplate
from ..engine.core import Engine
from ..engine.records import EngineConfig, Pooling, ResolvedDefaults
from ..engine.speculation import SPEC_TYPES, SpeculationConfig
from ..errors import EngineError, LfmError
from ..llama.backend import build_info
from ..llama.model import NativeModel, model_file_problem
from ..llama.mtmd import Projector
from ..media.sources import MediaPolicy
from ..settings import DEFAULT_HF_REPO, Settings
from .defaults import gguf_sampling, model_identity, resolve_defaults
from .hub import resolve_hf_model

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """The GGUF files a server loads: the model, and the multimodal projector if there is one."""

    model: str
    projector: str | None = None


def resolve_model_files(settings: Settings) -> ModelFiles:
    """``-m FILE`` if given (it must exist), else ``-hf`` (default: the seed's LFM2.5 instruct model), with
    ``--mmproj FILE``, or with ``-hf`` the repo's projector unless ``--no-mmproj``."""
    if settings.mmproj:
        problem = model_file_problem(settings.mmproj, "projector")
        if problem is not None:
            raise LfmError(problem)
    if settings.media_path and not os.path.isdir(settings.media_path):
        raise LfmError(f"--media-path {settings.media_path} is not a folder")
    if settings.model:
        problem = model_file_problem(settings.model)
        if problem is not None:
            raise LfmError(problem)
        return ModelFiles(settings.model, settings.mmproj)
    auto = settings.mmproj_auto and not settings.mmproj
    path, projector = resolve_hf_model(settings.hf_repo or DEFAULT_HF_REPO, settings.hf_file, projector=auto)
    return ModelFiles(path, settings.mmproj or projector)


def model_name(settings: Settings, path: str) -> str:
    """The id clients see: ``--alias``, else the file name (llama-server's rule)."""
    return settings.alias or Path(path).name


def sampling_defaults(settings: Settings, model: NativeModel) -> ResolvedDefaults:
    info = model.info
    identity = model_identity(
        info.name, info.basename, info.size_label, model.meta("general.finetune"), Path(info.path).stem
    )
    return resolve_defaults(
        cli=settings.sampling_defaults(), gguf_sampling=gguf_sampling(model.meta), identity=identity
    )


def chat_template(settings: Settings, model: NativeModel) -> ChatFormatter:
    """``--chat-template-file`` > the GGUF's template > ChatML (llama-server's fallback).

    With ``--no-jinja`` the template is matched to one of llama.cpp's built-in formats instead.
    """
    if settings.chat_template_file:
        source = Path(settings.chat_template_file).read_text(encoding="utf-8")
    else:
        source = model.info.chat_template or ("chatml" if not settings.jinja else CHATML_TEMPLATE)
    if not settings.jinja:
        return BuiltinTemplate(source, lambda s, m, add: model.apply_builtin_template(s, m, add_assistant=add))
    return ChatTemplate(source, bos_token=model.info.bos_token, eos_token=model.info.eos_token)


def engine_config(settings: Settings) -> EngineConfig:
    return EngineConfig(
        slot_similarity=settings.slot_prompt_similarity,
        max_queue=settings.max_queue,
        max_checkpoints=settings.ctx_checkpoints,
        cache_ram_bytes=settings.cache_ram * 2**20,
        cache_reuse=settings.cache_reuse,
        n_ctx=settings.ctx_size,
        n_slots=settings.parallel,
        n_batch=settings.batch_size,
        n_ubatch=settings.ubatch_size,
        n_threads=settings.threads,
        n_threads_batch=settings.threads_batch,
        media_cache_bytes=settings.media_cache * 2**20,
        embeddings=settings.embeddings or settings.reranking,
        pooling=cast(Pooling | None, "rank" if settings.reranking else settings.pooling),
        speculation=speculation_config(settings),
    )


def speculation_config(settings: Settings) -> SpeculationConfig:
    """``--spec-type`` and its sizes; a type lfmserve does not draft with is a startup error naming it."""
    types = tuple(t for t in (settings.spec_type or "").split(",") if t and t != "none")
    unknown = [t for t in types if t not in SPEC_TYPES]
    if unknown:
        raise EngineError(f"--spec-type {unknown[0]} is not supported (supported: {', '.join(SPEC_TYPES)})")
    if settings.spec_draft_n_max < 0 or min(settings.spec_ngram_simple_size_n, settings.spec_ngram_simple_size_m) < 1:
        raise EngineError("--spec-draft-n-max must be >= 0 and the n-gram sizes >= 1")
    return SpeculationConfig(
        types=types,
        n_max=settings.spec_draft_n_max,
        n_min=settings.spec_draft_n_min,
        ngram_size_n=settings.spec_ngram_simple_size_n,
        ngram_size_m=settings.spec_ngram_simple_size_m,
    )


def load_projector(settings: Settings, path: str, model: NativeModel) -> Projector:
    """The multimodal projector, its media marker llama-server's (``LLAMA_MEDIA_MARKER``, else random)."""
    n_threads = settings.threads_batch or settings.threads
    projector = Projector(
        path,
        model,
        n_threads=n_threads,
        side_threads=n_threads // 2 if settings.media_encode_beside else 0,
        use_gpu=settings.mmproj_offload and settings.n_gpu_layers != 0,
        image_min_tokens=settings.image_min_tokens,
        image_max_tokens=settings.image_max_tokens,
        media_marker=process_media_marker(),
    )
    kinds = [kind for kind, supported in (("vision", projector.vision), ("audio", projector.audio)) if supported]
    logger.info("loaded projector %s: %s (%s)", path, " and ".join(kinds), ", ".join(sorted(projector.projector_types)))
    return projector


def load_serving(settings: Settings, path: str | ModelFiles) -> Serving:
    """Load the model (and projector) and start its engine (seconds to minutes for a large model)."""
    files = path if isinstance(path, ModelFiles) else ModelFiles(path)
    model = NativeModel(files.model, n_gpu_layers=settings.n_gpu_layers)
    template = chat_template(settings, model)
    projector = load_projector(settings, files.projector, model) if files.projector else None
    engine = Engine(model, engine_config(settings), projector=projector)
    defaults = sampling_defaults(settings, model)
    info = model.info
    logger.info(
        "loaded %s: %s, %s params, %.1f MiB, n_ctx_train %d; context %d over %d slots (%d per slot), %d threads",
        path,
        info.architecture,
        f"{info.n_params:,}",
        info.size_bytes / 2**20,
        info.n_ctx_train,
        engine.n_ctx,
        engine.n_slots,
        engine.n_ctx_slot,
        settings.threads,
    )
    if defaults.family:
        logger.info("LFM family: %s", defaults.family)
    for name, value in defaults.params.to_json().items():
        if name in defaults.sources:
            logger.info("sampling default %s = %s (%s)", name, value, defaults.sources[name])
    if settings.cache_reuse > 0 and not engine.shifts_kv:
        logger.info(
            "--cache-reuse %d ignored: this model's memory cannot shift exactly (hybrid or sliding-window); "
            "prefixes are reused through checkpoints and slot copies instead",
            settings.cache_reuse,
        )
    serving = Serving(
        model,
        engine,
        template,
        model_name=model_name(settings, files.model),
        defaults=defaults,
        default_max_tokens=settings.n_predict,
        fingerprint=build_info(),
        reasoning_format=settings.reasoning_format,
        embd_normalize=settings.embd_normalize,
        media_policy=MediaPolicy(
            fetch=settings.media_fetch, fetch_private=settings.media_fetch_private, media_path=settings.media_path
        ),
    )
    serving.grammars.prepare()
    return serving
