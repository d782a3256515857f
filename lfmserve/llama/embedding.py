"""A second llama_context over the same model, made to output embeddings: many inputs per ``llama_decode``.

Generation keeps its own context (its slots, its prompt cache); this one holds nothing between calls. Each
input is a sequence of its own, decoded from an empty memory, so one decode embeds as many inputs as fit in
a micro-batch (``-ub``) and ``n_seq_max`` sequences (attention-only models; recurrent and hybrid ones take one
at a time, see :attr:`EmbeddingContext.n_seq_max`), where llama-server decodes one input per slot.

Example::

    embedder = EmbeddingContext(model, pooling="mean", n_ubatch=512, n_seq_max=64, n_threads=2)
    vectors = embedder.embed([[1, 306, 411], [1, 77]])  # two (n_embd,) arrays, not normalised
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import llama_cpp.llama_cpp as llama
import numpy as np
import numpy.typing as npt

from ..errors import EngineError
from .backend import buffer_sizes, captured_lines
from .batch import Batch
from .context import Rope, apply_rope
from .model import NativeModel
from .mtmd import attention
from .owner import ComputeOwner

#: llama.cpp's pooling types by the names of ``--pooling``.
POOLING_TYPES: dict[str, int] = {
    "none": llama.LLAMA_POOLING_TYPE_NONE,
    "mean": llama.LLAMA_POOLING_TYPE_MEAN,
    "cls": llama.LLAMA_POOLING_TYPE_CLS,
    "last": llama.LLAMA_POOLING_TYPE_LAST,
    "rank": llama.LLAMA_POOLING_TYPE_RANK,
}
_POOLING_NAMES = {value: name for name, value in POOLING_TYPES.items()}


class EmbeddingContext:
    """Embeddings of whole inputs: pooled (one row each) or, with pooling ``none``, one row per token."""

    def __init__(
        self,
        model: NativeModel,
        *,
        pooling: str | None,
        n_ubatch: int,
        n_seq_max: int,
        n_threads: int,
        non_causal_media: bool = False,
        rope: Rope | None = None,
    ) -> None:
        """``non_causal_media``: media rows are decoded with causal attention off, as mtmd decodes the images
        of a projector that asks for it (:attr:`~lfmserve.llama.mtmd.Projector.non_causal_images`)."""
        params = llama.llama_context_default_params()
        params.embeddings = True
        params.pooling_type = POOLING_TYPES[pooling] if pooling else llama.LLAMA_POOLING_TYPE_UNSPECIFIED
        params.n_ctx = n_ubatch
        params.n_batch = params.n_ubatch = n_ubatch
        one_at_a_time = bool(llama.llama_model_is_recurrent(model.handle) or llama.llama_model_is_hybrid(model.handle))
        # More sequences than outputs fails an assert in llama.cpp; one for recurrent state: see n_seq_max below.
        params.n_seq_max = 1 if one_at_a_time else min(n_seq_max, n_ubatch)
        params.n_threads = params.n_threads_batch = n_threads
        params.kv_unified = True  # the sequences of one decode share the micro-batch's cells
        params.no_perf = True
        apply_rope(params, rope)
        with captured_lines() as lines:
            self._ctx = llama.llama_init_from_model(model.handle, params)
        #: Bytes of llama.cpp's buffers for this context, as :attr:`.NativeContext.buffers`.
        self.buffers = buffer_sizes(lines)
        if not self._ctx:
            raise EngineError("failed to create the embedding context (out of memory?)")
        self.model = model
        self._memory = llama.llama_get_memory(self._ctx)
        #: The pooling in effect (the model's when none was asked for).
        self.pooling = _POOLING_NAMES[llama.llama_pooling_type(self._ctx)]
        self.n_ubatch = llama.llama_n_ubatch(self._ctx)
        #: Inputs per decode. One for recurrent and hybrid models (LFM2): llama.cpp splits their micro-batches
        #: into equal-length runs per sequence, and with inputs of unequal lengths its mean pooling aborts the
        #: process (``GGML_ASSERT(ggml_can_mul_mat(a, b))`` in ``build_pooling``); one at a time was also faster
        #: (64 inputs of ~48 tokens on the LFM2-350M-shaped model: 11.7 s, against 12.6 s four at a time).
        self.n_seq_max = llama.llama_n_seq_max(self._ctx)
        if self.pooling == "rank":
            # A reranker's pairs too: their prompts are long (the template's), and packed their masked attention
            # over every pair's cells cost more than it saved (16 pairs of ~115 tokens on a Qwen3-0.6B-shaped
            # model: 11.3 s, one at a time 10.1 s); alone, the scores are llama-server's to the bit.
            self.n_seq_max = 1
        self.n_embd = llama.llama_model_n_embd_out(model.handle)
        #: The width of a pooled vector (the classifier's outputs with rank pooling).
        self.width = llama.llama_model_n_cls_out(model.handle) if self.pooling == "rank" else self.n_embd
        try:
            self._batch = Batch(self.n_ubatch)
        except BaseException:
            self.close()  # the context made is freed when what follows fails
            raise
        self._rows_batch: Batch | None = None  # media rows, made on first use
        self.non_causal_media = non_causal_media
        #: The thread that decodes on it (:mod:`.owner`): the engine's, between its steps.
        self.owner = ComputeOwner("the embedding context")

    def embed(self, inputs: Sequence[Sequence[int]]) -> list[npt.NDArray[np.float32]]:
        """One decode of ``inputs`` (at most ``n_seq_max``, ``n_ubatch`` tokens in all): each input's pooled
        ``(n_embd,)`` row, or its ``(n_tokens, n_embd)`` rows with pooling ``none``; copies, not normalised."""
        if len(inputs) > self.n_seq_max or sum(map(len, inputs)) > self.n_ubatch or not all(inputs):
            raise ValueError("inputs must be non-empty and fit one micro-batch and the sequence limit")
        batch = self._batch
        batch.clear()
        starts = []
        for seq_id, tokens in enumerate(inputs):
            starts.append(batch.n_tokens)
            batch.add(tokens, 0, seq_id, True)
        batch.logits[: batch.n_tokens] = 1  # every token is an output (llama.cpp does so for embeddings anyway)
        llama.llama_memory_clear(self._memory, True)
        self._decode(batch)
        if self.pooling == "none":
            return [self._rows(start, len(tokens)) for start, tokens in zip(starts, inputs, strict=True)]
        return [self._pooled(seq_id) for seq_id in range(len(inputs))]

    def embed_pieces(self, pieces: Sequence[npt.NDArray[Any]]) -> npt.NDArray[np.float32]:
        """One input made of pieces (int32 token ids, or float32 ``(n, n_embd)`` media rows from a projector),
        decoded in turn as llama-server decodes a prompt's chunks: the pooled row of the last piece's decode
        (llama.cpp pools over one decode's tokens), or that piece's rows with pooling ``none``."""
        if not pieces or sum(len(p) for p in pieces) > self.n_ubatch or not all(len(p) for p in pieces):
            raise ValueError("pieces must be non-empty and fit one micro-batch")
        llama.llama_memory_clear(self._memory, True)
        position = 0
        for piece in pieces:
            media = piece.dtype == np.float32
            if media:
                if self._rows_batch is None:
                    self._rows_batch = Batch(self.n_ubatch, n_embd=self.model.info.n_embd)
                batch = self._rows_batch
                batch.clear()
                batch.add_embeddings(piece, position, 0, True)
            else:
                batch = self._batch
                batch.clear()
                batch.add(piece, position, 0, True)
            batch.logits[: batch.n_tokens] = 1
            with attention(self._ctx, non_causal=media and self.non_causal_media):
                self._decode(batch)
            position += len(piece)
        if self.pooling == "none":
            return self._rows(0, len(pieces[-1]))
        return self._pooled(0)

    def _decode(self, batch: Batch) -> None:
        self.owner.check()
        batch.struct.n_tokens = batch.n_tokens
        rc = llama.llama_decode(self._ctx, batch.struct)
        if rc != 0:
            raise EngineError(f"llama_decode failed for embeddings (code {rc})")

    def _pooled(self, seq_id: int) -> npt.NDArray[np.float32]:
        pointer = llama.llama_get_embeddings_seq(self._ctx, seq_id)
        if not pointer:
            raise EngineError(f"no pooled embedding for sequence {seq_id}")
        return np.ctypeslib.as_array(pointer, shape=(self.width,)).copy()

    def _rows(self, start: int, n_tokens: int) -> npt.NDArray[np.float32]:
        rows = np.empty((n_tokens, self.n_embd), dtype=np.float32)
        for i in range(n_tokens):
            rows[i] = np.ctypeslib.as_array(llama.llama_get_embeddings_ith(self._ctx, start + i), shape=(self.n_embd,))
        return rows

    def close(self) -> None:
        if self._ctx:
            llama.llama_free(self._ctx)
            self._ctx = None
