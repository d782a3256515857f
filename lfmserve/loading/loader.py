"""Turns :class:`Settings` and a GGUF path into a ready :class:`Serving`: model, engine, template, defaults.

Shared by the server (which runs it in a background thread while ``/health`` answers 503) and by
tests. The startup log names the model, its context and where each sampling default came from.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any, cast

from ..chat.media import process_media_marker
from ..chat.preamble import read_preamble
from ..chat.serving import Serving, ServingOptions
from ..chat.template import CHATML_TEMPLATE, BuiltinTemplate, ChatFormatter, ChatTemplate, Reasoning
from ..engine.core import Engine
from ..engine.records import ResolvedDefaults
from ..errors import LfmError
from ..llama.backend import build_info
from ..llama.model import NativeModel, builtin_template_names
from ..llama.mtmd import Projector
from ..media.sources import MediaPolicy
from ..media.video import VideoOptions
from ..settings import (
    ChatSettings,
    SamplingSettings,
    Settings,
    SourceSettings,
    physical_cores,
)
from .defaults import gguf_sampling, model_identity, resolve_defaults
from .engine_config import engine_config
from .escapes import process_escapes
from .files import ModelFiles
from .model_load import load_weights
from .placement import projector_device

logger = logging.getLogger(__name__)


def model_name(source: SourceSettings, path: str) -> str:
    """The id clients see: the first of ``--alias``'s names in sorted order, else the file name (llama-server's
    rule)."""
    return source.aliases[0] if source.aliases else Path(path).name


def sampling_defaults(sampling: SamplingSettings, model: NativeModel) -> ResolvedDefaults:
    info = model.info
    identity = model_identity(
        info.name, info.basename, info.size_label, model.meta("general.finetune"), Path(info.path).stem
    )
    cli: dict[str, Any] = sampling.defaults()
    if sampling.escape and sampling.dry_sequence_breakers is not None:
        cli["dry_sequence_breakers"] = tuple(process_escapes(text) for text in sampling.dry_sequence_breakers)
    if sampling.ignore_eos:
        cli["ignore_eos"] = True
    if sampling.logit_bias:
        for token, _ in sampling.logit_bias:
            if not model.is_valid_token(token):
                raise LfmError(f"--logit-bias: token {token} is not in the vocabulary ({model.n_vocab} tokens)")
        cli["logit_bias"] = sampling.logit_bias
    return resolve_defaults(cli=cli, gguf_sampling=gguf_sampling(model.meta), identity=identity)


#: Template variables with flags of their own, which llama-server warns about in ``--chat-template-kwargs``.
_DEPRECATED_KWARGS = {
    "enable_thinking": "--reasoning on / --reasoning off",
    "preserve_reasoning": "--reasoning-preserve / --no-reasoning-preserve",
}


def chat_template(chat: ChatSettings, model: NativeModel) -> ChatFormatter:
    """``--chat-template-file`` > ``--chat-template`` > the GGUF's template > ChatML (llama-server's fallback).

    ``--chat-template`` is Jinja source, or one of llama.cpp's built-in names: ``chatml`` is the Jinja ChatML
    (as in llama-server), the others llama.cpp's built-in format, with or without ``--jinja``, where
    llama-server would print the name as a template's text. With ``--no-jinja`` the template is matched to
    one of those built-in formats. ``--reasoning`` (``--reasoning-format nothink``: off) sets the template's
    ``enable_thinking``; ``--chat-template-kwargs``, ``--reasoning-effort`` and ``--reasoning-preserve`` its other
    variables. Like llama-server, it warns about the switches ``--chat-template-kwargs`` sets that have flags.
    """
    if chat.chat_template_file:
        source = Path(chat.chat_template_file).read_text(encoding="utf-8")
    else:
        source = chat.chat_template or model.info.chat_template or "chatml"
    builtin = source in builtin_template_names() and source != "chatml"
    if not chat.jinja or builtin:
        return BuiltinTemplate(source, lambda s, m, add: model.apply_builtin_template(s, m, add_assistant=add))
    reasoning = "off" if chat.reasoning_format == "nothink" else cast(Reasoning, chat.reasoning)
    try:
        variables = chat.template_variables
    except ValueError as exc:
        raise LfmError(str(exc)) from None
    for key, instead in _DEPRECATED_KWARGS.items():
        if key in chat.template_kwargs:
            logger.warning("Setting '%s' via --chat-template-kwargs is deprecated. Use %s instead.", key, instead)
    return ChatTemplate(
        CHATML_TEMPLATE if source == "chatml" else source,
        bos_token=model.info.bos_token,
        eos_token=model.info.eos_token,
        reasoning=reasoning,
        variables=variables,
    )


def serving_options(settings: Settings, name: str, defaults: ResolvedDefaults) -> ServingOptions:
    """What the flags decide for every request the serving layer prepares."""
    media = settings.media
    stops = settings.sampling.reverse_prompt
    return ServingOptions(
        model_name=name,
        defaults=defaults,
        default_max_tokens=settings.sampling.n_predict,
        fingerprint=build_info(),
        reasoning_format=settings.chat.reasoning_format,
        media_policy=MediaPolicy(
            fetch=media.media_fetch, fetch_private=media.media_fetch_private, media_path=media.media_path
        ),
        video=VideoOptions(
            fps=media.video_fps,
            timestamp_interval_ms=media.video_timestamp_interval,
            ffmpeg_dir=media.video_ffmpeg_dir or None,
        ),
        video_decodes=media.video_decodes if media.video_decodes > 0 else max(1, physical_cores() // 2),
        embd_normalize=settings.embedding.embd_normalize,
        cache_prompt=settings.engine.cache_prompt,
        reverse_prompts=tuple(process_escapes(text) if settings.sampling.escape else text for text in stops),
        default_stop=settings.sampling.stop,
        preamble=read_preamble(settings.chat.system_prompt_file, settings.chat.chat_messages_file),
        verbose=settings.server.verbose,
        reasoning_budget=settings.chat.reasoning_budget,
        reasoning_budget_message=settings.chat.reasoning_budget_message,
        skip_chat_parsing=settings.chat.skip_chat_parsing,
        prefill_assistant=settings.chat.prefill_assistant,
        grammar=settings.sampling.grammar,
        json_schema=None if settings.sampling.json_schema is None else json.loads(settings.sampling.json_schema),
        n_keep=settings.sampling.n_keep,
        backend_sampling=settings.sampling.backend_sampling,
    )


def load_projector(settings: Settings, path: str, model: NativeModel) -> Projector:
    """The multimodal projector, its media marker llama-server's (``LLAMA_MEDIA_MARKER``, else random)."""
    n_threads = settings.threads.threads_batch or settings.threads.threads
    use_gpu, device = projector_device(settings)
    projector = Projector(
        path,
        model,
        n_threads=n_threads,
        side_threads=n_threads // 2 if settings.media.media_encode_beside else 0,
        use_gpu=use_gpu,
        device=device,
        image_min_tokens=settings.media.image_min_tokens,
        image_max_tokens=settings.media.image_max_tokens,
        media_marker=process_media_marker(),
        warmup=settings.weights.warmup,
    )
    kinds = [kind for kind, supported in (("vision", projector.vision), ("audio", projector.audio)) if supported]
    logger.info("loaded projector %s: %s (%s)", path, " and ".join(kinds), ", ".join(sorted(projector.projector_types)))
    return projector


def load_serving(settings: Settings, path: str | ModelFiles) -> Serving:
    """Load the model (and projector) and start its engine (seconds to minutes for a large model)."""
    files = path if isinstance(path, ModelFiles) else ModelFiles(path)
    return serving_of(*load_weights(settings, files), files)


def serving_of(settings: Settings, model: NativeModel, files: ModelFiles) -> Serving:
    """The serving layer of a loaded ``model`` (:func:`.model_load.load_weights`): template, projector, engine. The
    model is closed again if a step fails."""
    with contextlib.ExitStack() as loaded:  # what is loaded is freed again if a later step fails
        loaded.callback(model.close)
        template = chat_template(settings.chat, model)
        projector = load_projector(settings, files.projector, model) if files.projector else None
        if projector is not None:
            loaded.callback(projector.close)
        engine = Engine(model, engine_config(settings, files.draft), projector=projector)
        loaded.callback(engine.close)
        serving = _serving(settings, model, engine, template)
        loaded.pop_all()
    return serving


def _serving(settings: Settings, model: NativeModel, engine: Engine, template: ChatFormatter) -> Serving:
    """The loaded model's serving layer, after the start's log lines."""
    defaults = sampling_defaults(settings.sampling, model)
    info = model.info
    logger.info(
        "loaded %s: %s, %s params, %.1f MiB, n_ctx_train %d; context %d over %d slots (%d per slot), %d threads",
        model.path,
        info.architecture,
        f"{info.n_params:,}",
        info.size_bytes / 2**20,
        info.n_ctx_train,
        engine.n_ctx,
        engine.n_slots,
        engine.n_ctx_slot,
        settings.threads.threads,
    )
    if defaults.family:
        logger.info("LFM family: %s", defaults.family)
    for name, value in defaults.params.to_json().items():
        if name in defaults.sources:
            logger.info("sampling default %s = %s (%s)", name, value, defaults.sources[name])
    if settings.engine.cache_reuse > 0 and not engine.shifts_kv:
        logger.info(
            "--cache-reuse %d ignored: this model's memory cannot shift exactly (hybrid or sliding-window); "
            "prefixes are reused through checkpoints and slot copies instead",
            settings.engine.cache_reuse,
        )
    # The grammar tokenizer (llguidance) is built by the first constrained request, not here: most servers get none,
    # and it holds 110 MB for a 262,144-token vocabulary (docs/architecture.md, "Imports and memory").
    return Serving(
        model, engine, template, serving_options(settings, model_name(settings.source, model.path), defaults)
    )
