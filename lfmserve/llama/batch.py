"""A ``llama_batch`` whose arrays numpy owns: the engine fills whole slices, never one token at a time in Python.

A batch carries token ids or, for media, embedding rows (a projector's output): llama.cpp takes one or the
other per ``llama_decode``, so a context keeps one batch of each kind.
"""

from __future__ import annotations

import ctypes

import llama_cpp.llama_cpp as llama
import numpy as np
import numpy.typing as npt

from ..errors import EngineError


class Batch:
    """A ``llama_batch`` whose arrays are numpy-owned; one sequence id per token (or embedding row).

    ``n_embd`` > 0 makes a batch of embedding rows of that width instead of token ids.
    """

    def __init__(self, capacity: int, *, n_embd: int = 0) -> None:
        self.capacity = capacity
        self.token = np.zeros(0 if n_embd else capacity, dtype=np.int32)
        self.embd = np.zeros((capacity, n_embd) if n_embd else (0, 0), dtype=np.float32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        # seq_id is an array of pointers, one per token, each into our contiguous ``seq`` array.
        self._seq_ptrs = (self.seq.ctypes.data + 4 * np.arange(capacity, dtype=np.uintp)).astype(np.uintp)
        self.n_tokens = 0
        self.struct = llama.llama_batch(
            n_tokens=0,
            token=self.token.ctypes.data_as(ctypes.POINTER(llama.llama_token)) if not n_embd else None,
            embd=self.embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float)) if n_embd else None,
            pos=self.pos.ctypes.data_as(ctypes.POINTER(llama.llama_pos)),
            n_seq_id=self.n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
            seq_id=ctypes.cast(self._seq_ptrs.ctypes.data, ctypes.POINTER(ctypes.POINTER(llama.llama_seq_id))),
            logits=self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
        )

    def clear(self) -> None:
        self.n_tokens = 0

    @property
    def free(self) -> int:
        return self.capacity - self.n_tokens

    def add(self, tokens: npt.ArrayLike, first_pos: int, seq_id: int, want_last_logits: bool) -> int:
        """Append consecutive tokens of one sequence; returns the batch index of the last one."""
        tokens = np.asarray(tokens, dtype=np.int32)
        a, b = self._reserve(len(tokens), first_pos, seq_id, want_last_logits)
        self.token[a:b] = tokens
        return b - 1

    def add_embeddings(self, rows: npt.NDArray[np.float32], first_pos: int, seq_id: int, want_last_logits: bool) -> int:
        """Append consecutive embedding rows of one sequence; returns the batch index of the last one."""
        a, b = self._reserve(len(rows), first_pos, seq_id, want_last_logits)
        self.embd[a:b] = rows
        return b - 1

    def _reserve(self, n: int, first_pos: int, seq_id: int, want_last_logits: bool) -> tuple[int, int]:
        """Room for ``n`` entries of one sequence at consecutive positions, filled but for their input."""
        a, b = self.n_tokens, self.n_tokens + n
        if b > self.capacity:
            raise EngineError(f"batch overflow: {b} > {self.capacity}")
        self.pos[a:b] = np.arange(first_pos, first_pos + n, dtype=np.int32)
        self.seq[a:b] = seq_id
        self.logits[a:b] = 0
        if want_last_logits:
            self.logits[b - 1] = 1
        self.n_tokens = b
        return a, b
