"""What a decode of n tokens costs on this machine, measured once when the engine starts.

How long a draft is worth verifying depends on it (:mod:`.worth`), and no formula has it right: llama.cpp's
CPU matrix kernels take the batch four columns at a time, so on Gemma-3-270M 8 tokens decode faster than 5,
6 or 7, and 2 cost nearly as much as 4. So the engine decodes throwaway batches of 1 .. n_max tokens on an
empty sequence (all positions asking for logits, as a verified draft does) before it serves, within a time
budget: up to 2 seconds on a 270M model. A model that decodes a token in under 2 ms (the test models) is
not measured: the linear model of :mod:`.worth` stands in. Each count is timed twice where the budget
allows and the faster time kept (the other is noise from elsewhere on the machine).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from ...llama.context import NativeContext
from .worth import BatchCosts

logger = logging.getLogger(__name__)

#: Seconds the measurement may take at most (the first pass stops there; a second pass only in what is left).
BUDGET_S = 2.0
#: A single-token decode faster than this is timer noise and Python's own per-step time (the test models):
#: the linear model stands in, and the same request drafts the same way on every run.
MEASURABLE_S = 0.002
#: Single-token decodes timed for the unit (every other count is divided by their fastest).
UNIT_REPEATS = 3


def measure_batch_costs(ctx: NativeContext, *, seq_id: int, n_max: int, budget_s: float = BUDGET_S) -> BatchCosts:
    """Decode 1 .. ``n_max`` tokens on ``seq_id`` (empty, and left empty), each as a whole verified batch."""
    n_max = max(1, min(n_max, ctx.n_batch))
    start = time.perf_counter()
    deadline = start + budget_s
    best: list[float] = []
    for n in range(1, n_max + 1):
        if best and time.perf_counter() > deadline:
            break
        best.append(min(_timed_decode(ctx, seq_id, n) for _ in range(UNIT_REPEATS if n == 1 else 1)))
        if best[0] < MEASURABLE_S:
            logger.info("speculation: a decode takes %.2f ms, too little to measure: linear costs", best[0] * 1000)
            return BatchCosts()
    for n in range(2, len(best) + 1):
        if time.perf_counter() > deadline:
            break
        best[n - 1] = min(best[n - 1], _timed_decode(ctx, seq_id, n))
    costs = BatchCosts(best)
    logger.info(
        "speculation: decode costs of 1..%d tokens measured in %.1f s (1 token %.1f ms; in single decodes: %s)",
        len(best),
        time.perf_counter() - start,
        best[0] * 1000,
        " ".join(f"{u:.2f}" for u in costs.units),
    )
    return costs


def _timed_decode(ctx: NativeContext, seq_id: int, n: int) -> float:
    batch = ctx.batch
    batch.clear()
    batch.add(np.arange(n, dtype=np.int32) % ctx.model.n_vocab, 0, seq_id, want_last_logits=True)
    batch.logits[:n] = 1
    t0 = time.perf_counter()
    try:
        ctx.decode(batch)
        return time.perf_counter() - t0
    finally:
        batch.clear()
        ctx.seq_clear(seq_id)
