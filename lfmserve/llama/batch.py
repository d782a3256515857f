"""A ``llama_batch`` whose arrays numpy owns: the engine fills whole slices, never one token at a time in Python."""

from __future__ import annotations

import ctypes

import llama_cpp.llama_cpp as llama
import numpy as np
import numpy.typing as npt

from ..errors import EngineError


class Batch:
    """A ``llama_batch`` whose arrays are numpy-owned; one sequence id per token."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        # seq_id is an array of pointers, one per token, each into our contiguous ``seq`` array.
        self._seq_ptrs = (self.seq.ctypes.data + 4 * np.arange(capacity, dtype=np.uintp)).astype(np.uintp)
        self.n_tokens = 0
        self.struct = llama.llama_batch(
            n_tokens=0,
            token=self.token.ctypes.data_as(ctypes.POINTER(llama.llama_token)),
            embd=None,
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
        n = len(tokens)
        a, b = self.n_tokens, self.n_tokens + n
        if b > self.capacity:
            raise EngineError(f"batch overflow: {b} > {self.capacity}")
        self.token[a:b] = tokens
        self.pos[a:b] = np.arange(first_pos, first_pos + n, dtype=np.int32)
        self.seq[a:b] = seq_id
        self.logits[a:b] = 0
        if want_last_logits:
            self.logits[b - 1] = 1
        self.n_tokens = b
        return b - 1
