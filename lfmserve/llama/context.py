"""A llama_context over one model: decoding the batch, each sequence's memory, and saving or restoring its state."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, Protocol

import llama_cpp.llama_cpp as llama
import numpy as np
import numpy.typing as npt

from ..errors import EngineError
from .backend import buffer_sizes, captured_lines, planned_memory
from .batch import Batch
from .model import NativeModel
from .owner import ComputeOwner
from .threadpool import PoolPlacement, Threadpools

_FLASH_ATTN = {
    "auto": llama.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


class KvCache(Protocol):
    """How the KV cache is kept (:class:`~lfmserve.engine.records.KvCacheOptions`)."""

    @property
    def flash_attn(self) -> str: ...
    @property
    def type_k(self) -> str: ...
    @property
    def type_v(self) -> str: ...
    @property
    def swa_full(self) -> bool: ...
    @property
    def offload_kqv(self) -> bool: ...
    @property
    def op_offload(self) -> bool: ...


class Rope(Protocol):
    """RoPE and YaRN settings (:class:`~lfmserve.engine.records.RopeOptions`), in llama.cpp's terms."""

    @property
    def scaling(self) -> str | None: ...
    @property
    def freq_base(self) -> float: ...
    @property
    def freq_scale(self) -> float: ...
    @property
    def yarn_orig_ctx(self) -> int: ...
    @property
    def yarn_ext_factor(self) -> float: ...
    @property
    def yarn_attn_factor(self) -> float: ...
    @property
    def yarn_beta_slow(self) -> float: ...
    @property
    def yarn_beta_fast(self) -> float: ...


_ROPE_SCALING = {
    None: llama.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED,
    "none": llama.LLAMA_ROPE_SCALING_TYPE_NONE,
    "linear": llama.LLAMA_ROPE_SCALING_TYPE_LINEAR,
    "yarn": llama.LLAMA_ROPE_SCALING_TYPE_YARN,
}


def apply_rope(params: Any, rope: Rope | None) -> None:
    """Set a ``llama_context_params``' RoPE fields (their defaults mean "the model's own", as ``rope``'s do)."""
    if rope is None:
        return
    params.rope_scaling_type = _ROPE_SCALING[rope.scaling]
    params.rope_freq_base = rope.freq_base
    params.rope_freq_scale = rope.freq_scale
    params.yarn_orig_ctx = rope.yarn_orig_ctx
    params.yarn_ext_factor = rope.yarn_ext_factor
    params.yarn_attn_factor = rope.yarn_attn_factor
    params.yarn_beta_slow = rope.yarn_beta_slow
    params.yarn_beta_fast = rope.yarn_beta_fast


def apply_kv(params: Any, kv: KvCache | None) -> None:
    """Set a ``llama_context_params``' KV cache fields and where the context computes (``-kvo``, ``--op-offload``)."""
    if kv is None:
        return  # llama.cpp's defaults: flash attention auto, f16 K and V, a window-sized SWA cache
    params.flash_attn_type = _FLASH_ATTN[kv.flash_attn]
    params.type_k = getattr(llama, f"GGML_TYPE_{kv.type_k.upper()}")
    params.type_v = getattr(llama, f"GGML_TYPE_{kv.type_v.upper()}")
    params.swa_full = kv.swa_full
    params.offload_kqv = kv.offload_kqv  # -kvo / -nkvo and --op-offload, as llama-server sets them
    params.op_offload = kv.op_offload


class NativeContext:
    """A llama_context over one model: decoding, per-sequence memory and state."""

    #: The threadpools it computes on (:meth:`place_threads`); None: ggml's default pool for each graph.
    _threadpools: Threadpools | None = None

    def __init__(
        self,
        model: NativeModel,
        *,
        n_ctx: int,
        n_batch: int,
        n_ubatch: int,
        n_seq_max: int,
        n_threads: int,
        n_threads_batch: int,
        n_rollback: int = 0,
        kv: KvCache | None = None,
        rope: Rope | None = None,
    ) -> None:
        """``n_rollback``: tokens a recurrent model's state can be rolled back by (its last states are kept;
        llama.cpp ignores it for models without recurrent layers, whose tails are removed anyway)."""
        params = llama.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = min(n_ubatch, n_batch)
        params.n_seq_max = n_seq_max
        params.n_rs_seq = n_rollback
        params.n_threads = n_threads
        params.n_threads_batch = n_threads_batch
        params.kv_unified = True  # one KV pool shared by all slots, as llama-server's auto -np
        apply_kv(params, kv)
        apply_rope(params, rope)
        params.no_perf = True
        with captured_lines() as lines:
            self._ctx = llama.llama_init_from_model(model.handle, params)
        #: Bytes of llama.cpp's buffers for this context: ``KV``, ``RS`` (recurrent state), ``compute``, ``output``.
        self.buffers = buffer_sizes(lines)
        #: Bytes of host memory the context takes: its caches and states as planned (known over a ``no_alloc``
        #: model too, whose buffers are empty), its compute and output buffers.
        self.planned_bytes = planned_memory(lines) + self.buffers.get("compute", 0) + self.buffers.get("output", 0)
        if not self._ctx:
            raise EngineError(
                "failed to create the llama.cpp context (out of memory, or a KV cache type that does not divide "
                "the model's head size: llama.cpp's log says which)"
            )
        self.model = model
        self.n_threads, self.n_threads_batch = n_threads, n_threads_batch
        self._threads_used = (max(n_threads, n_threads_batch), 0)
        self._memory = llama.llama_get_memory(self._ctx)
        self.n_ctx = llama.llama_n_ctx(self._ctx)
        self.n_batch = llama.llama_n_batch(self._ctx)
        try:
            self.batch = Batch(self.n_batch)
        except BaseException:
            self.close()  # the context made is freed when what follows fails
            raise
        #: Media embedding rows, one micro-batch at most per decode (made on first use: a text-only server
        #: never needs its ``n_ubatch * n_embd`` floats).
        self._embd_batch: Batch | None = None
        self.n_ubatch = llama.llama_n_ubatch(self._ctx)
        #: The thread that decodes on it (:mod:`.owner`): the engine's.
        self.owner = ComputeOwner("this llama context")

    @property
    def handle(self) -> Any:
        return self._ctx

    @property
    def embd_batch(self) -> Batch:
        """The batch of embedding rows (media), ``n_ubatch`` rows of the model's width."""
        if self._embd_batch is None:
            self._embd_batch = Batch(self.n_ubatch, n_embd=self.model.info.n_embd)
        return self._embd_batch

    def place_threads(self, placement: PoolPlacement, placement_batch: PoolPlacement) -> None:
        """Compute on threadpools placed as ``-C``, ``--cpu-strict``, ``--prio``, ``--poll`` say (and their batch
        forms), freed with the context; with ggml's defaults for both, nothing changes (:mod:`.threadpool`)."""
        self._threadpools = Threadpools.placed(self.n_threads, self.n_threads_batch, placement, placement_batch)
        if self._threadpools is not None:
            self._threadpools.attach(self._ctx)

    def use_threads(self, count: int, *, lent: int = 0) -> None:
        """Decode on at most ``count`` threads of each kind (the engine's pick for the next batch), ``lent`` fewer
        (never more than half) while those cores go to another encoder."""
        if (count, lent) != self._threads_used:
            self._threads_used = (count, lent)
            keep = [
                min(limit, count) - min(lent, min(limit, count) // 2)
                for limit in (self.n_threads, self.n_threads_batch)
            ]
            llama.llama_set_n_threads(self._ctx, keep[0], keep[1])

    def warm_up(self) -> None:
        """llama-server's ``--warmup``: BOS and EOS decoded once, so that the first request does not pay for the
        first touches of the weights and buffers, then forgotten."""
        tokens = [token for token in (self.model.bos_id, self.model.eos_id) if token != llama.LLAMA_TOKEN_NULL]
        self.batch.add(tokens or [0], 0, 0, True)
        self.decode()
        self.batch.clear()
        llama.llama_memory_clear(self._memory, True)
        llama.llama_synchronize(self._ctx)

    def decode(self, batch: Batch | None = None) -> None:
        """Decode ``batch`` (the token batch by default); raise :class:`EngineError` on failure."""
        if batch is None:
            batch = self.batch
        self.owner.check()
        batch.struct.n_tokens = batch.n_tokens
        rc = llama.llama_decode(self._ctx, batch.struct)
        if rc == 1:  # llama-server's words for it
            raise EngineError("Context size has been exceeded: no room in the KV cache (llama_decode code 1)")
        if rc != 0:
            reason = {2: "aborted", -1: "invalid batch"}.get(rc, "fatal error")
            raise EngineError(f"llama_decode failed: {reason} (code {rc})")

    def seq_rm(self, seq_id: int, p0: int, p1: int = -1) -> bool:
        return bool(llama.llama_memory_seq_rm(self._memory, seq_id, p0, p1))

    def seq_shift(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        """Move positions [p0, p1) of a sequence by ``delta`` (KV shifting: the keys are re-rotated)."""
        llama.llama_memory_seq_add(self._memory, seq_id, p0, p1, delta)

    @property
    def can_shift(self) -> bool:
        return bool(llama.llama_memory_can_shift(self._memory))

    def seq_cp(self, src: int, dst: int, n_tokens: int) -> None:
        """Make ``dst`` hold ``src``'s first ``n_tokens`` (KV cells are shared, not copied)."""
        llama.llama_memory_seq_cp(self._memory, src, dst, 0, n_tokens)

    def save_seq_file(self, seq_id: int, path: str, tokens: Sequence[int]) -> int:
        """Write the sequence's full state and its tokens to a file; returns the bytes written."""
        arr = (llama.llama_token * len(tokens))(*tokens)
        written = llama.llama_state_seq_save_file(self._ctx, path.encode(), seq_id, arr, len(tokens))
        if written == 0:
            raise EngineError(f"could not save sequence {seq_id}")
        return int(written)

    def load_seq_file(self, seq_id: int, path: str, capacity: int) -> tuple[list[int], int]:
        """Restore a saved sequence into ``seq_id``; returns its tokens and the bytes read."""
        arr = (llama.llama_token * capacity)()
        count = ctypes.c_size_t(0)
        read = llama.llama_state_seq_load_file(self._ctx, path.encode(), seq_id, arr, capacity, ctypes.byref(count))
        if read == 0:
            raise EngineError(
                f"could not restore sequence {seq_id} (not a saved slot of this model, or larger than it)"
            )
        return list(arr[: count.value]), int(read)

    def seq_clear(self, seq_id: int) -> None:
        if not self.seq_rm(seq_id, -1, -1):
            raise EngineError(f"could not clear sequence {seq_id}")

    def logits(self, batch_index: int) -> npt.NDArray[np.float32]:
        """The logits row of the last decode at ``batch_index`` (a view: it changes with the next decode)."""
        return np.ctypeslib.as_array(llama.llama_get_logits_ith(self._ctx, batch_index), shape=(self.model.n_vocab,))

    def seq_pos_max(self, seq_id: int) -> int:
        return int(llama.llama_memory_seq_pos_max(self._memory, seq_id))

    def get_state(self, seq_id: int, *, partial: bool) -> npt.NDArray[np.uint8]:
        """The sequence's state; ``partial`` keeps only the recurrent / sliding-window part.

        Written straight into an uninitialised array: a zeroed buffer plus a copy to ``bytes`` cost
        30 ms for a 28 MiB state, the read itself 2 ms.
        """
        flags = llama.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY if partial else 0
        size = llama.llama_state_seq_get_size_ext(self._ctx, seq_id, flags)
        buf = np.empty(size, dtype=np.uint8)
        written = llama.llama_state_seq_get_data_ext(self._ctx, _bytes_pointer(buf), size, seq_id, flags)
        if written != size:
            raise EngineError(f"state read of sequence {seq_id} wrote {written} of {size} bytes")
        return buf

    def set_state(self, seq_id: int, data: npt.NDArray[np.uint8], *, partial: bool) -> None:
        flags = llama.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY if partial else 0
        if llama.llama_state_seq_set_data_ext(self._ctx, _bytes_pointer(data), data.size, seq_id, flags) != data.size:
            raise EngineError(f"state restore of sequence {seq_id} failed")

    def close(self) -> None:
        if self._ctx:
            llama.llama_free(self._ctx)
            self._ctx = None
        if self._threadpools is not None:  # after the context, which computes on them until freed
            self._threadpools.close()
            self._threadpools = None


def _bytes_pointer(buffer: npt.NDArray[np.uint8]) -> Any:
    return buffer.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
