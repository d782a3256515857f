"""How many tokens one decode may hold and still compute every row as a decode of that token alone would.

llama.cpp's CPU matrix kernels do not give a token's logits independently of its batch. Where weights are
repacked (AVX2 or AVX-512 without AMX), a batch of n tokens sends its first n - n % 4 rows through a 4-row
gemm (``ggml_gemm_q4_K_8x8_q8_K`` for Q4_K) and the rest through the gemv a single-token decode uses; the two
round differently (up to 0.94 of a logit on Gemma-3-270M). Without repacking the same happens from 8 rows. A
greedy run with drafts verified in such batches departs from the run without drafts at near ties (7 of 18
prompts on Gemma-3-270M); llama-server, whose drafts are verified the same way, departs on the same prompts
once it drafts in free text.

So with ``--spec-exact`` (off by default, as llama-server has no such mode) the engine measures the largest batch
whose rows all come out bitwise as single decodes, before it serves, and never verifies a draft in a larger one
(:class:`~.speculator.Speculator`): with one request in flight, the output with drafts is the output without them.
The probe decodes a fixed 16-token sequence one token at a time, then in chunks of 2, 3, ... tokens, every position
asking for logits, and stops at the first chunk size with a row that differs. Sixteen rows make a difference that
exists show: about a third of the rows a gemm computes differ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ...llama.context import NativeContext

#: Tokens of the probe sequence.
PROBE_TOKENS = 16


@dataclass(frozen=True, slots=True, kw_only=True)
class Verification:
    """How the server verifies drafts, decided before its first step; ``/props`` reports it beside the types, so a
    client can tell whether drafts may move near ties and, with ``--spec-exact``, what exactness costs here."""

    #: ``--spec-exact``: drafts verified only in batches of at most ``exact_batch`` tokens (not under synthetic
    #: acceptance, whose drafts are kept by chance). False: in batches of any size, as llama-server verifies them.
    exact: bool = False
    #: ``--spec-exact``'s measurement (:func:`exact_batch_size`); None where nothing was measured.
    exact_batch: int | None = None
    #: Whether drafts are made at all: not without ``--spec-type``, nor where no batch of ``exact_batch`` tokens
    #: or fewer decodes faster than its tokens one at a time.
    drafting: bool = False


def exact_batch_size(ctx: NativeContext, *, seq_id: int, n_max: int) -> int:
    """The largest batch, up to ``n_max`` tokens, whose logits equal single-token decodes' (``seq_id`` is empty,
    and left empty)."""
    n_vocab = ctx.model.n_vocab
    tokens = (np.arange(PROBE_TOKENS, dtype=np.int32) * 7919 + 1000) % n_vocab
    alone = _decode_in_chunks(ctx, seq_id, tokens, 1)
    for n in range(2, min(n_max, PROBE_TOKENS) + 1):
        if not np.array_equal(_decode_in_chunks(ctx, seq_id, tokens, n), alone):
            return n - 1
    return max(1, min(n_max, PROBE_TOKENS))


def _decode_in_chunks(
    ctx: NativeContext, seq_id: int, tokens: npt.NDArray[np.int32], n: int
) -> npt.NDArray[np.float32]:
    rows = np.empty((len(tokens), ctx.model.n_vocab), dtype=np.float32)
    try:
        for start in range(0, len(tokens), n):
            chunk = tokens[start : start + n]
            ctx.batch.clear()
            first = ctx.batch.add(chunk, start, seq_id, want_last_logits=True) - len(chunk) + 1
            ctx.batch.logits[first : first + len(chunk)] = 1
            ctx.decode()
            for i in range(len(chunk)):
                rows[start + i] = ctx.logits(first + i)
    finally:
        ctx.batch.clear()
        ctx.seq_clear(seq_id)
    return rows
