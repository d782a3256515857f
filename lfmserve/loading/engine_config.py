"""The engine's records made from the settings groups: :class:`EngineConfig` and its :class:`SpeculationConfig`,
and the context one request of a model will have (:func:`slot_context`), known from its settings before it loads.

The engine knows nothing of flags: it takes byte counts, slot counts and sizes. This module is the one place
that turns ``--cache-ram`` MiB into bytes, ``--rerank`` into rank pooling and ``--spec-*`` into drafter sizes,
and checks the speculative sizes as llama-server checks them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, cast

from ..engine.records import (
    CpuPlacement,
    EngineConfig,
    KvCacheOptions,
    Pooling,
    RopeOptions,
    ThreadPlacement,
    context_sizes,
)
from ..engine.speculation import SPEC_TYPES, NgramModSizes, NgramSizes, SpeculationConfig, resolve_synth_rates
from ..errors import EngineError
from ..settings import Settings, SpeculationSettings, ThreadSettings
from ..settings.engine import control_vector_files
from ..settings.placement import FULL_CONTEXT
from .placement import draft_placement


def engine_config(settings: Settings, draft_model: str | None = None) -> EngineConfig:
    """The engine's settings; ``draft_model`` is the draft's resolved file (default: ``-md``)."""
    engine, embedding = settings.engine, settings.embedding
    return EngineConfig(
        slot_similarity=engine.slot_prompt_similarity,
        max_queue=engine.max_queue,
        max_checkpoints=engine.ctx_checkpoints,
        cache_ram_bytes=engine.cache_ram * 2**20,
        cache_disk=engine.cache_disk,
        cache_disk_bytes=engine.cache_disk_size * 2**20,
        cache_reuse=engine.cache_reuse,
        cache_idle_slots=engine.cache_idle_slots,
        context_shift=engine.context_shift,
        shared_context=engine.kv_unified,
        kv=KvCacheOptions(
            flash_attn=cast(Literal["auto", "on", "off"], engine.flash_attn),
            type_k=engine.cache_type_k,
            type_v=engine.cache_type_v,
            swa_full=engine.swa_full,
            offload_kqv=settings.devices.kv_offload,
            op_offload=settings.devices.op_offload,
        ),
        rope=RopeOptions(
            scaling=cast(Literal["none", "linear", "yarn"] | None, engine.rope_scaling),
            freq_base=engine.rope_freq_base,
            freq_scale=1.0 / engine.rope_scale if engine.rope_scale else engine.rope_freq_scale,
            yarn_orig_ctx=engine.yarn_orig_ctx,
            yarn_ext_factor=engine.yarn_ext_factor,
            yarn_attn_factor=engine.yarn_attn_factor,
            yarn_beta_slow=engine.yarn_beta_slow,
            yarn_beta_fast=engine.yarn_beta_fast,
        ),
        n_ctx=requested_context(settings),
        slot_cap=engine.kv_unified_per_slot,
        n_slots=engine.parallel,
        n_batch=engine.batch_size,
        n_ubatch=engine.ubatch_size,
        n_threads=settings.threads.threads,
        n_threads_batch=settings.threads.threads_batch,
        adaptive_threads=settings.threads.adaptive_threads,
        threads=thread_placement(settings.threads),
        media_cache_bytes=settings.media.media_cache * 2**20,
        embeddings=embedding.embeddings or embedding.reranking,
        pooling=cast(Pooling | None, "rank" if embedding.reranking else embedding.pooling),
        speculation=speculation_config(settings.speculation, draft_model),
        lora=_lora_adapters(settings),
        control_vectors=_control_vectors(settings),
        control_vector_layers=engine.control_vector_layer_range,
        draft_placement=draft_placement(settings.devices),
        warmup=settings.weights.warmup,
    )


def thread_placement(threads: ThreadSettings) -> ThreadPlacement:
    """``--numa`` and each threadpool's placement, a flag not given taking the value of the one it follows (as
    llama-server's help says): the batch flags their generation flag's, the draft's flags the target's, and the
    draft's batch flags the draft's."""
    generation = CpuPlacement(
        cpus=threads.cpu_mask or (), strict=threads.cpu_strict, prio=threads.prio, poll=threads.poll
    )
    draft = _following(
        generation,
        threads.spec_draft_cpu_mask,
        threads.spec_draft_cpu_strict,
        threads.spec_draft_prio,
        threads.spec_draft_poll,
    )
    return ThreadPlacement(
        numa=cast(Literal["distribute", "isolate", "numactl"] | None, threads.numa),
        generation=generation,
        batch=_following(
            generation, threads.cpu_mask_batch, threads.cpu_strict_batch, threads.prio_batch, threads.poll_batch
        ),
        draft=draft,
        draft_batch=_following(
            draft,
            threads.spec_draft_cpu_mask_batch,
            threads.spec_draft_cpu_strict_batch,
            threads.spec_draft_prio_batch,
            threads.spec_draft_poll_batch,
        ),
    )


def _following(
    base: CpuPlacement, cpus: tuple[int, ...] | None, strict: bool | None, prio: int | None, poll: int | None
) -> CpuPlacement:
    """``base`` with the values given (None: not given)."""
    return CpuPlacement(
        cpus=base.cpus if cpus is None else cpus,
        strict=base.strict if strict is None else strict,
        prio=base.prio if prio is None else prio,
        poll=base.poll if poll is None else poll,
    )


def slot_context(settings: Settings, n_ctx_train: int) -> int:
    """The tokens one request may use of a model trained on ``n_ctx_train`` once served with ``settings``: the
    ``n_ctx`` its ``/props`` and ``/v1/models`` will report, known before it loads (the router lists it)."""
    engine = settings.engine
    sizes = context_sizes(
        requested_context(settings),
        engine.parallel,
        n_ctx_train=n_ctx_train,
        shared=engine.kv_unified,
        slot_cap=engine.kv_unified_per_slot,
    )
    return sizes.n_ctx_slot


def requested_context(settings: Settings) -> int:
    """The context asked of llama.cpp: ``-c``, else, with ``--kv-unified-per-slot N``, ``-np`` times N (as
    llama-server sizes the pool, unless ``-c 0`` asked for the model's whole context), else 0: the model's."""
    engine = settings.engine
    if engine.ctx_size or engine.kv_unified_per_slot <= 0 or settings.devices.fit_ctx == FULL_CONTEXT:
        return engine.ctx_size
    return engine.parallel * engine.kv_unified_per_slot


def _lora_adapters(settings: Settings) -> tuple[tuple[str, float], ...]:
    try:
        return settings.source.lora_adapters
    except ValueError as exc:
        raise EngineError(str(exc)) from None


def _control_vectors(settings: Settings) -> tuple[tuple[str, float], ...]:
    try:
        return control_vector_files(settings.engine)
    except ValueError as exc:
        raise EngineError(str(exc)) from None


def speculation_config(spec: SpeculationSettings, draft_model: str | None = None) -> SpeculationConfig:
    """``--spec-type`` and its sizes, checked as llama-server checks them; a type lfmserve does not draft
    with is a startup error naming it. ``--spec-default`` adds ngram-mod, as llama-server's does (its sizes were set
    where the flag stood: :class:`~..settings.fields.ShortcutAction`). ``draft_model``: the draft's resolved file
    (default: ``-md``)."""
    named = [t for t in (spec.spec_type or "").split(",") if t and t != "none"]
    types = tuple(dict.fromkeys(named + (["ngram-mod"] if spec.spec_default else [])))
    unknown = [t for t in types if t not in SPEC_TYPES]
    if unknown:
        raise EngineError(f"--spec-type {unknown[0]} is not supported (supported: {', '.join(SPEC_TYPES)})")
    _check_sizes(spec)
    if not types and (spec.spec_synth_len is not None or spec.spec_synth_rates):
        raise EngineError("synthetic acceptance requires an initialized speculative decoding context")
    config = SpeculationConfig(
        types=types,
        n_max=spec.spec_draft_n_max,
        n_min=spec.spec_draft_n_min,
        p_min=spec.spec_draft_p_min,
        ngram_simple=NgramSizes(size_n=spec.spec_ngram_simple_size_n, size_m=spec.spec_ngram_simple_size_m),
        ngram_map_k=NgramSizes(size_n=spec.spec_ngram_map_k_size_n, size_m=spec.spec_ngram_map_k_size_m),
        ngram_map_k4v=NgramSizes(
            size_n=spec.spec_ngram_map_k4v_size_n,
            size_m=spec.spec_ngram_map_k4v_size_m,
            min_hits=spec.spec_ngram_map_k4v_min_hits,
        ),
        ngram_mod=NgramModSizes(
            n_match=spec.spec_ngram_mod_n_match, n_min=spec.spec_ngram_mod_n_min, n_max=spec.spec_ngram_mod_n_max
        ),
        draft_model=draft_model or spec.spec_draft_model,
        n_threads=spec.spec_draft_threads,
        n_threads_batch=spec.spec_draft_threads_batch,
        type_k=spec.spec_draft_type_k,
        type_v=spec.spec_draft_type_v,
        exact=spec.spec_exact,
    )
    try:
        rates = resolve_synth_rates(spec.spec_synth_len, spec.synth_rate_values, config.max_draft)
    except ValueError as exc:
        raise EngineError(str(exc)) from None
    return replace(config, synth_rates=rates) if rates else config


def _check_sizes(spec: SpeculationSettings) -> None:
    """llama-server's range checks of the drafters' sizes, with its messages."""
    if spec.spec_draft_n_max < 0:
        raise EngineError("--spec-draft-n-max: invalid value")
    if not 0.0 <= spec.spec_draft_p_min <= 1.0:
        raise EngineError("--spec-draft-p-min must be between 0 and 1")
    lookups = (
        spec.spec_ngram_simple_size_n,
        spec.spec_ngram_map_k_size_n,
        spec.spec_ngram_map_k4v_size_n,
        spec.spec_ngram_mod_n_match,
    )
    if any(not 1 <= n <= 1024 for n in lookups):
        raise EngineError("ngram size N must be between 1 and 1024 inclusive")
    drafts = (spec.spec_ngram_simple_size_m, spec.spec_ngram_map_k_size_m, spec.spec_ngram_map_k4v_size_m)
    if any(not 1 <= m <= 1024 for m in drafts):
        raise EngineError("ngram size M must be between 1 and 1024 inclusive")
    if min(spec.spec_ngram_simple_min_hits, spec.spec_ngram_map_k_min_hits, spec.spec_ngram_map_k4v_min_hits) < 1:
        raise EngineError("ngram min hits must be at least 1")
    if not 0 <= spec.spec_ngram_mod_n_min <= 1024 or not 0 <= spec.spec_ngram_mod_n_max <= 1024:
        raise EngineError("ngram n-min and n-max must be between 0 and 1024 inclusive")
