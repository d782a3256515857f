"""The engine: context, slots, batches, caches, KV types and control vectors.

One group of :class:`~lfmserve.settings.Settings` (:mod:`.groups` lists them all).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from typing import ClassVar

from ..c_numbers import leading_float
from .fields import KV_CACHE_TYPES, OnOffAction, flag, parse_count, switch
from .placement import ContextSizeAction


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSettings:
    """What the engine holds and how it batches: context, slots, threads, KV cache, prompt cache."""

    TITLE: ClassVar[str] = "context, batching and prompt cache"

    ctx_size: int = field(
        default=0,
        metadata=flag(
            "-c",
            "--ctx-size",
            help="context size in tokens (0 = the model's, which --fit may not shrink; not given: the model's, fitted)",
            type=int,
            action=ContextSizeAction,
        ),
    )
    parallel: int = field(
        default=4,
        metadata=flag(
            "-np",
            "--parallel",
            help="number of slots; each gets --ctx-size / N tokens, rounded up to a multiple of 256 (at most the "
            "training context)",
            type=int,
        ),
    )
    batch_size: int = field(default=2048, metadata=flag("-b", "--batch-size", help="logical batch size", type=int))
    ubatch_size: int = field(default=512, metadata=flag("-ub", "--ubatch-size", help="physical batch size", type=int))
    flash_attn: str = field(
        default="auto",
        metadata=flag("-fa", "--flash-attn", help="flash attention: on, off or auto", choices=("on", "off", "auto")),
    )
    cache_type_k: str = field(
        default="f16",
        metadata=flag("-ctk", "--cache-type-k", help="KV cache type for K", choices=KV_CACHE_TYPES),
    )
    cache_type_v: str = field(
        default="f16",
        metadata=flag(
            "-ctv",
            "--cache-type-v",
            help="KV cache type for V (quantized needs flash attention)",
            choices=KV_CACHE_TYPES,
        ),
    )
    control_vector: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "--control-vector",
            help="control vector GGUF added at scale 1 (comma-separated, repeatable)",
            action="append",
            metavar="FNAME",
        ),
    )
    control_vector_scaled: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "--control-vector-scaled",
            help="control vector GGUF added at a scale: FNAME:SCALE (comma-separated, repeatable)",
            action="append",
            metavar="FNAME:SCALE,...",
        ),
    )
    control_vector_layer_range: tuple[int, int] | None = field(
        default=None,
        metadata=flag(
            "--control-vector-layer-range",
            help="layers the control vectors are added to, START and END included (default: 1 to the last)",
            nargs=2,
            type=int,
            metavar=("START", "END"),
        ),
    )
    rope_scaling: str | None = field(
        default=None,
        metadata=flag(
            "--rope-scaling",
            help="RoPE frequency scaling: none, linear or yarn (default: the model's)",
            choices=("none", "linear", "yarn"),
        ),
    )
    rope_scale: float | None = field(
        default=None,
        metadata=flag(
            "--rope-scale",
            help="RoPE context scaling factor: --rope-freq-scale 1/N (this one wins if both)",
            type=float,
        ),
    )
    rope_freq_base: float = field(
        default=0.0, metadata=flag("--rope-freq-base", help="RoPE base frequency (0 = the model's)", type=float)
    )
    rope_freq_scale: float = field(
        default=0.0,
        metadata=flag("--rope-freq-scale", help="RoPE frequency scaling factor (0 = the model's)", type=float),
    )
    yarn_orig_ctx: int = field(
        default=0, metadata=flag("--yarn-orig-ctx", help="YaRN: the model's original context (0 = its own)", type=int)
    )
    yarn_ext_factor: float = field(
        default=-1.0,
        metadata=flag("--yarn-ext-factor", help="YaRN: extrapolation mix factor (-1 = the model's)", type=float),
    )
    yarn_attn_factor: float = field(
        default=-1.0,
        metadata=flag("--yarn-attn-factor", help="YaRN: attention magnitude scale (-1 = the model's)", type=float),
    )
    yarn_beta_slow: float = field(
        default=-1.0, metadata=flag("--yarn-beta-slow", help="YaRN: high correction dim (-1 = the model's)", type=float)
    )
    yarn_beta_fast: float = field(
        default=-1.0, metadata=flag("--yarn-beta-fast", help="YaRN: low correction dim (-1 = the model's)", type=float)
    )
    swa_full: bool = switch(
        "--swa-full",
        help="full-size sliding-window cache (more memory, no re-processing)",
        default=False,
        action="store_true",
    )
    kv_unified: bool = switch(
        "-kvu",
        "--kv-unified",
        "-no-kvu",
        "--no-kv-unified",
        help="let any slot fill the whole context, which the slots share; when it runs out, every generation in the "
        "decode fails (default: each slot gets -c / -np)",
        default=False,
        action=OnOffAction,
    )
    kv_unified_per_slot: int = field(
        default=0,
        metadata=flag(
            "--kv-unified-per-slot",
            help="the most tokens one slot may use (0 = its share); without -c the context is -np times it",
            type=parse_count,
        ),
    )
    cont_batching: bool = switch(
        "-cb",
        "--cont-batching",
        "-nocb",
        "--no-cont-batching",
        help="continuous batching: always on in lfmserve (-nocb is accepted and has no effect)",
        default=True,
        action=OnOffAction,
    )
    context_shift: bool = switch(
        "--context-shift",
        help="when a generation fills its slot's context, drop the older half and go on (attention-only models)",
        default=False,
    )
    slot_prompt_similarity: float = field(
        default=0.10,
        metadata=flag(
            "-sps",
            "--slot-prompt-similarity",
            help="reuse an idle slot whose cache shares more than this fraction of the prompt",
            type=float,
        ),
    )
    max_queue: int = field(
        default=1024,
        metadata=flag("--max-queue", help="requests that may wait for a slot; more answer 503", type=int),
    )
    ctx_checkpoints: int = field(
        default=32,
        metadata=flag(
            "-ctxcp",
            "--ctx-checkpoints",
            "--swa-checkpoints",
            help="checkpoints of the recurrent / sliding-window state kept per slot",
            type=int,
        ),
    )
    cache_ram: int = field(
        default=8192,
        metadata=flag("-cram", "--cache-ram", help="MiB of host RAM for evicted prompt caches (0 = off)", type=int),
    )
    cache_disk: str | None = field(
        default=None,
        metadata=flag(
            "--cache-disk",
            help="folder where the RAM cache's prompts are also kept, to be found again after a restart (one "
            "subfolder per model and context: servers of several models may share it)",
        ),
    )
    cache_disk_size: int = field(
        default=8192,
        metadata=flag(
            "--cache-disk-size",
            help="MiB the whole --cache-disk folder may hold, every model's files together (oldest out first)",
            type=int,
        ),
    )
    cache_reuse: int = field(
        default=0,
        metadata=flag(
            "--cache-reuse",
            help="min chunk size to reuse from the cache by KV shifting (attention-only models; 0 = off)",
            type=int,
        ),
    )
    cache_prompt: bool = switch(
        "--cache-prompt",
        help="reuse the cached prefix of a prompt: the default of a request's cache_prompt",
        default=True,
    )
    cache_idle_slots: bool = switch(
        "--cache-idle-slots",
        help="keep an idle slot's prompt in the RAM cache (--cache-ram) when another request takes the slot",
        default=True,
    )


def control_vector_files(engine: EngineSettings) -> tuple[tuple[str, float], ...]:
    """Each control vector file and its scale, as llama-server reads them: ``--control-vector`` ones at 1, then
    ``--control-vector-scaled`` ones (each ``FNAME:SCALE`` with one colon, the scale read as ``std::stof`` reads
    it). Raises ValueError for an entry of another form."""
    vectors = [(path, 1.0) for value in engine.control_vector for path in _csv_row(value)]
    for value in engine.control_vector_scaled:
        for item in _csv_row(value):
            parts = item.split(":")
            scale = leading_float(parts[-1])  # std::stof: a scale of ``0.5x`` is 0.5
            if len(parts) != 2 or scale is None:
                raise ValueError(f"--control-vector-scaled {item!r}: expected FNAME:SCALE")
            vectors.append((parts[0], scale))
    return tuple(vectors)


def _csv_row(value: str) -> list[str]:
    """llama.cpp's ``parse_csv_row``: comma-separated, double quotes around a field that has commas, empty fields
    kept."""
    return next(csv.reader([value]), [""])
