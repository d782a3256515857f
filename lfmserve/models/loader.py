"""Turns :class:`Settings` and a GGUF path into a ready :class:`Serving`: model, engine, template, defaults.

Shared by the server (which runs it in a background thread while ``/health`` answers 503) and by
tests. The startup log names the model, its context and where each sampling default came from.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from ..chat.media import process_media_marker
from ..chat.serving import Serving
from ..chat.template import CHATML_TEMPLATE, BuiltinTemplate, ChatFormatter, ChatTemplate, Reasoning
from ..engine.core import Engine
from ..engine.records import EngineConfig, KvCacheOptions, Pooling, ResolvedDefaults
from ..engine.speculation import SPEC_TYPES, NgramModSizes, NgramSizes, SpeculationConfig
from ..errors import EngineError, LfmError
from ..llama.backend import build_info
from ..llama.model import NativeModel, builtin_template_names, model_file_problem
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
    #: ``draft-simple``'s model (``-md FILE``, or downloaded for ``-hfd``).
    draft: str | None = None


def resolve_model_files(settings: Settings) -> ModelFiles:
    """``-m FILE`` if given (it must exist), else ``-hf`` (default: the seed's LFM2.5 instruct model), with
    ``--mmproj FILE``, or with ``-hf`` the repo's projector unless ``--no-mmproj``."""
    if settings.mmproj:
        problem = model_file_problem(settings.mmproj, "projector")
        if problem is not None:
            raise LfmError(problem)
    if settings.media_path and not os.path.isdir(settings.media_path):
        raise LfmError(f"--media-path {settings.media_path} is not a folder")
    draft = resolve_draft_model(settings)
    if settings.model:
        problem = model_file_problem(settings.model)
        if problem is not None:
            raise LfmError(problem)
        return ModelFiles(settings.model, settings.mmproj, draft)
    auto = settings.mmproj_auto and not settings.mmproj
    path, projector = resolve_hf_model(
        settings.hf_repo or DEFAULT_HF_REPO, settings.hf_file, projector=auto, offline=settings.offline
    )
    return ModelFiles(path, settings.mmproj or projector, draft)


def resolve_draft_model(settings: Settings) -> str | None:
    """``-hfd REPO`` (with ``-md`` naming the file there, as llama-server), else ``-md FILE`` (it must exist)."""
    if settings.spec_draft_hf:
        return resolve_hf_model(settings.spec_draft_hf, settings.spec_draft_model, offline=settings.offline)[0]
    if settings.spec_draft_model:
        problem = model_file_problem(settings.spec_draft_model, "draft model")
        if problem is not None:
            raise LfmError(problem)
    return settings.spec_draft_model


def model_name(settings: Settings, path: str) -> str:
    """The id clients see: the first of ``--alias``'s names in sorted order, else the file name (llama-server's
    rule)."""
    return settings.aliases[0] if settings.aliases else Path(path).name


def sampling_defaults(settings: Settings, model: NativeModel) -> ResolvedDefaults:
    info = model.info
    identity = model_identity(
        info.name, info.basename, info.size_label, model.meta("general.finetune"), Path(info.path).stem
    )
    return resolve_defaults(
        cli=settings.sampling_defaults(), gguf_sampling=gguf_sampling(model.meta), identity=identity
    )


def chat_template(settings: Settings, model: NativeModel) -> ChatFormatter:
    """``--chat-template-file`` > ``--chat-template`` > the GGUF's template > ChatML (llama-server's fallback).

    ``--chat-template`` is Jinja source, or one of llama.cpp's built-in names: ``chatml`` is the Jinja ChatML
    (as in llama-server), the others llama.cpp's built-in format, with or without ``--jinja``, where
    llama-server would print the name as a template's text. With ``--no-jinja`` the template is matched to
    one of those built-in formats. ``--reasoning`` (``--reasoning-format nothink``: off) sets the template's
    ``enable_thinking``.
    """
    if settings.chat_template_file:
        source = Path(settings.chat_template_file).read_text(encoding="utf-8")
    else:
        source = settings.chat_template or model.info.chat_template or "chatml"
    builtin = source in builtin_template_names() and source != "chatml"
    if not settings.jinja or builtin:
        return BuiltinTemplate(source, lambda s, m, add: model.apply_builtin_template(s, m, add_assistant=add))
    reasoning = "off" if settings.reasoning_format == "nothink" else cast(Reasoning, settings.reasoning)
    return ChatTemplate(
        CHATML_TEMPLATE if source == "chatml" else source,
        bos_token=model.info.bos_token,
        eos_token=model.info.eos_token,
        reasoning=reasoning,
    )


def engine_config(settings: Settings, draft_model: str | None = None) -> EngineConfig:
    """The engine's settings; ``draft_model`` is the draft's resolved file (default: ``-md``)."""
    return EngineConfig(
        slot_similarity=settings.slot_prompt_similarity,
        max_queue=settings.max_queue,
        max_checkpoints=settings.ctx_checkpoints,
        cache_ram_bytes=settings.cache_ram * 2**20,
        cache_reuse=settings.cache_reuse,
        cache_idle_slots=settings.cache_idle_slots,
        context_shift=settings.context_shift,
        kv=KvCacheOptions(
            flash_attn=cast(Literal["auto", "on", "off"], settings.flash_attn),
            type_k=settings.cache_type_k,
            type_v=settings.cache_type_v,
            swa_full=settings.swa_full,
        ),
        n_ctx=settings.ctx_size,
        n_slots=settings.parallel,
        n_batch=settings.batch_size,
        n_ubatch=settings.ubatch_size,
        n_threads=settings.threads,
        n_threads_batch=settings.threads_batch,
        media_cache_bytes=settings.media_cache * 2**20,
        embeddings=settings.embeddings or settings.reranking,
        pooling=cast(Pooling | None, "rank" if settings.reranking else settings.pooling),
        speculation=speculation_config(settings, draft_model),
    )


def speculation_config(settings: Settings, draft_model: str | None = None) -> SpeculationConfig:
    """``--spec-type`` and its sizes, checked as llama-server checks them; a type lfmserve does not draft
    with is a startup error naming it. ``draft_model``: the draft's resolved file (default: ``-md``)."""
    types = tuple(dict.fromkeys(t for t in (settings.spec_type or "").split(",") if t and t != "none"))
    unknown = [t for t in types if t not in SPEC_TYPES]
    if unknown:
        raise EngineError(f"--spec-type {unknown[0]} is not supported (supported: {', '.join(SPEC_TYPES)})")
    if settings.spec_draft_n_max < 0:
        raise EngineError("--spec-draft-n-max: invalid value")
    if not 0.0 <= settings.spec_draft_p_min <= 1.0:
        raise EngineError("--spec-draft-p-min must be between 0 and 1")
    s = settings
    lookups = (
        s.spec_ngram_simple_size_n,
        s.spec_ngram_map_k_size_n,
        s.spec_ngram_map_k4v_size_n,
        s.spec_ngram_mod_n_match,
    )
    if any(not 1 <= n <= 1024 for n in lookups):
        raise EngineError("ngram size N must be between 1 and 1024 inclusive")
    if any(
        not 1 <= m <= 1024 for m in (s.spec_ngram_simple_size_m, s.spec_ngram_map_k_size_m, s.spec_ngram_map_k4v_size_m)
    ):
        raise EngineError("ngram size M must be between 1 and 1024 inclusive")
    if min(s.spec_ngram_simple_min_hits, s.spec_ngram_map_k_min_hits, s.spec_ngram_map_k4v_min_hits) < 1:
        raise EngineError("ngram min hits must be at least 1")
    if not 0 <= s.spec_ngram_mod_n_min <= 1024 or not 0 <= s.spec_ngram_mod_n_max <= 1024:
        raise EngineError("ngram n-min and n-max must be between 0 and 1024 inclusive")
    return SpeculationConfig(
        types=types,
        n_max=s.spec_draft_n_max,
        n_min=s.spec_draft_n_min,
        p_min=s.spec_draft_p_min,
        ngram_simple=NgramSizes(size_n=s.spec_ngram_simple_size_n, size_m=s.spec_ngram_simple_size_m),
        ngram_map_k=NgramSizes(size_n=s.spec_ngram_map_k_size_n, size_m=s.spec_ngram_map_k_size_m),
        ngram_map_k4v=NgramSizes(
            size_n=s.spec_ngram_map_k4v_size_n,
            size_m=s.spec_ngram_map_k4v_size_m,
            min_hits=s.spec_ngram_map_k4v_min_hits,
        ),
        ngram_mod=NgramModSizes(
            n_match=s.spec_ngram_mod_n_match, n_min=s.spec_ngram_mod_n_min, n_max=s.spec_ngram_mod_n_max
        ),
        draft_model=draft_model or s.spec_draft_model,
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
    model = NativeModel(files.model, n_gpu_layers=settings.n_gpu_layers, repack=settings.repack)
    template = chat_template(settings, model)
    projector = load_projector(settings, files.projector, model) if files.projector else None
    engine = Engine(model, engine_config(settings, files.draft), projector=projector)
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
        cache_prompt=settings.cache_prompt,
        reverse_prompts=settings.reverse_prompt,
        verbose=settings.verbose,
        media_policy=MediaPolicy(
            fetch=settings.media_fetch, fetch_private=settings.media_fetch_private, media_path=settings.media_path
        ),
    )
    serving.grammars.prepare()
    return serving
