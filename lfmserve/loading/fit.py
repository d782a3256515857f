"""``--fit``: a ``-c 0`` context shrunk to what host memory holds, by llama-server's rule.

llama-server calls libcommon's ``common_fit_params`` before it loads a model; the wheel does not ship libcommon,
so this module applies the same rule for a build whose only device is the CPU (llama.cpp's ``nd == 0`` case):

1. What the model and its context would take is measured without reading the weights: the model loaded with
   ``no_alloc`` (metadata only, buffers planned) and a context made over it, whose KV cache, recurrent state,
   compute and output sizes llama.cpp logs as it plans them.
2. That is compared with the machine's physical memory (``sysconf``, as ggml's CPU device reports it: llama.cpp
   counts it all as free) less ``--fit-target`` MiB (default 1024) and, with a projector, the projector's file.
3. If it fits, nothing changes. If not, and the context was left to the model (``-c`` not given), it is
   interpolated between the full one and ``--fit-ctx`` tokens a slot (default 4096) from a second measurement at
   that minimum, rounded down to 256 tokens a slot. ``-c 0`` given asks for the full context: llama-server then
   never shrinks it (``FULL_CONTEXT``), nor does ``-c N``.

llama-server also grows a ``-c 0`` context to the training context per slot when the slots do not share it
(``-np N`` without ``--kv-unified``); lfmserve's ``-c 0`` stays the training context shared out between the
slots (docs/usage.md, "Context"), and the fit starts from that.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ..engine.records import EngineConfig
from ..llama.context import NativeContext
from ..llama.model import NativeModel
from ..settings.placement import FULL_CONTEXT

_MIB = 2**20


@dataclass(frozen=True, slots=True)
class Fit:
    """The context to make, and what the rule found (for the log)."""

    n_ctx: int
    fits: bool
    reason: str


def fit_context(*, n_ctx_max: int, n_ctx_min: int, align: int, available: int, used_at: Callable[[int], int]) -> Fit:
    """``common_fit_params``' context step on the host: ``used_at(n)`` is the bytes a context of ``n`` tokens and the
    model take, ``available`` the bytes they may (total less the margin). ``n_ctx_min`` is the smallest context it
    may shrink to (every slot's ``--fit-ctx``; :data:`FULL_CONTEXT` when ``-c 0`` was asked for), ``align`` the
    step it rounds down by (256 tokens a slot). Not fitting even at the smallest is not an error: llama-server
    warns and loads that smallest context anyway."""
    used_max = used_at(n_ctx_max)
    if used_max <= available:
        return Fit(n_ctx_max, True, f"projected to use {used_max // _MIB} MiB of {available // _MIB} MiB: no change")
    if n_ctx_max <= n_ctx_min:
        why = (
            "the full context was asked for (-c 0)"
            if n_ctx_min >= FULL_CONTEXT
            else "the context is no more than --fit-ctx"
        )
        return Fit(n_ctx_max, False, f"projected to use {used_max // _MIB} MiB of {available // _MIB} MiB, and {why}")
    used_min = used_at(n_ctx_min)
    if used_min >= available:
        return Fit(
            n_ctx_min, False, f"projected to use {used_min // _MIB} MiB of {available // _MIB} MiB even at the minimum"
        )
    n_ctx = n_ctx_min + (n_ctx_max - n_ctx_min) * (available - used_min) // (used_max - used_min)
    n_ctx = max(n_ctx - n_ctx % align, n_ctx_min)
    return Fit(n_ctx, True, f"reduced from {n_ctx_max} tokens, which would use {used_max // _MIB} MiB")


def host_memory() -> int:
    """The machine's physical memory in bytes, as ggml's CPU device reports it (total and free alike)."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def used_bytes(probe: NativeModel, config: EngineConfig, n_ctx: int) -> int:
    """Bytes the model and a context of ``n_ctx`` tokens made as ``config`` says would take, planned over ``probe``
    (the model loaded with ``no_alloc``): nothing is read or allocated."""
    context = NativeContext(
        probe,
        n_ctx=n_ctx,
        n_batch=config.n_batch,
        n_ubatch=config.n_ubatch,
        n_seq_max=config.n_slots,
        n_threads=1,
        n_threads_batch=1,
        kv=config.kv,
        rope=config.rope,
    )
    try:
        return probe.info.size_bytes + context.planned_bytes
    finally:
        context.close()


def measured_fit(
    probe: NativeModel, config: EngineConfig, *, n_ctx_min_per_slot: int, margin: int, total: int | None = None
) -> Fit:
    """:func:`fit_context` for the context ``config`` asks for (its ``n_ctx`` 0), measured over ``probe``, the model
    loaded with ``no_alloc``. ``margin``: bytes to leave (``--fit-target`` and the projector); ``total``: the
    memory to fit in (default :func:`host_memory`)."""
    n_streams = 1 if config.shared_context else max(config.n_slots, 1)
    return fit_context(
        n_ctx_max=config.context_sizes(probe.info.n_ctx_train).n_ctx,
        n_ctx_min=min(n_ctx_min_per_slot * n_streams, FULL_CONTEXT),
        align=256 * n_streams,
        available=(host_memory() if total is None else total) - margin,
        used_at=lambda n_ctx: used_bytes(probe, config, n_ctx),
    )
