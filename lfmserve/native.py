"""Owns the llama.cpp handles: model, vocabulary, context, batch and sampler chains.

Everything that touches ``llama_cpp.llama_cpp`` (the low-level ctypes bindings) lives here, so the
rest of the package deals in Python ints, bytes and dataclasses. Return codes become typed errors
(:class:`~lfmserve.errors.EngineError`); handles are freed in dependency order (samplers and
context before the model) by ``close()``.

The batch is allocated once, as numpy arrays the ``llama_batch`` struct points into: the engine
fills whole slices (tokens, positions, sequence ids, output flags) without a per-token Python loop.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import llama_cpp.llama_cpp as llama
import numpy as np
import numpy.typing as npt

from .errors import EngineError
from .penalties import LogitAdjuster
from .records import StateBuffer, TokenLogprob
from .sampling import GGUF_SAMPLING_KEYS, SamplingParams

if TYPE_CHECKING:
    from .constraints import TokenMask

logger = logging.getLogger(__name__)

# ggml log levels: 3 = warning, 4 = error; everything else (load chatter) goes to DEBUG.
_LOG_LEVELS = {3: logging.WARNING, 4: logging.ERROR}
_VOCAB_TYPES = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo2"}
_llama_logger = logging.getLogger("lfmserve.llama_cpp")
_backend_ready = False


def _log_llama(level: int, text: bytes, _user_data: Any) -> None:
    if text:
        _llama_logger.log(_LOG_LEVELS.get(level, logging.DEBUG), "%s", text.decode("utf-8", "replace").rstrip("\n"))


_forward_llama_log = llama.llama_log_callback(_log_llama)  # kept referenced: llama.cpp holds the pointer


def init_backend() -> None:
    """Initialise llama.cpp once per process and route its log to :mod:`logging`."""
    global _backend_ready
    if not _backend_ready:
        llama.llama_log_set(_forward_llama_log, None)
        llama.llama_backend_init()
        _backend_ready = True


def build_info() -> str:
    """The llama.cpp build linked in, named by the pinned llama-cpp-python release."""
    from importlib.metadata import version

    return f"llama-cpp-python {version('llama-cpp-python')}"


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What a loaded GGUF says about itself (shown by /props and /v1/models)."""

    path: str
    architecture: str
    name: str
    basename: str | None
    size_label: str | None
    description: str
    n_ctx_train: int
    n_params: int
    size_bytes: int
    n_vocab: int
    n_embd: int
    vocab_type: int
    chat_template: str | None
    bos_token: str
    eos_token: str
    add_bos: bool
    is_hybrid: bool
    is_recurrent: bool
    n_swa: int
    gguf_sampling: dict[str, float | int]

    @property
    def vocab_type_name(self) -> str:
        return _VOCAB_TYPES.get(self.vocab_type, str(self.vocab_type))

    @property
    def needs_checkpoints(self) -> bool:
        """Its memory cannot drop a tail by position alone (recurrent state or a sliding window)."""
        return self.is_hybrid or self.is_recurrent or self.n_swa > 0


class NativeModel:
    """A loaded GGUF: weights and vocabulary. Thread-safe for tokenizing; decoding needs a context."""

    def __init__(self, path: str | Path, *, n_gpu_layers: int = -1, vocab_only: bool = False) -> None:
        init_backend()
        self.path = str(path)
        if not Path(self.path).is_file():
            raise EngineError(f"model file not found: {self.path}")
        params = llama.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.vocab_only = vocab_only
        self._model = llama.llama_model_load_from_file(self.path.encode(), params)
        if not self._model:
            raise EngineError(f"failed to load model from {self.path}")
        self._vocab = llama.llama_model_get_vocab(self._model)
        self.n_vocab: int = llama.llama_vocab_n_tokens(self._vocab)
        self.bos_id = llama.llama_vocab_bos(self._vocab)
        self.eos_id = llama.llama_vocab_eos(self._vocab)
        # Looked up per generated token: answered from Python, so the engine thread does not give up the
        # GIL (and wait to get it back) for these calls.
        self._eog = frozenset(t for t in range(self.n_vocab) if llama.llama_vocab_is_eog(self._vocab, t))
        self._pieces: dict[tuple[int, bool], bytes] = {}
        self.info = self._read_info()

    @property
    def handle(self) -> Any:
        return self._model

    @property
    def vocab_handle(self) -> Any:
        return self._vocab

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as text, or None when the key is absent."""
        size = 4096
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama.llama_model_meta_val_str(self._model, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8", "replace")
            size = n + 1

    def _read_info(self) -> ModelInfo:
        m = self._model
        desc = ctypes.create_string_buffer(256)
        llama.llama_model_desc(m, desc, 256)
        template = llama.llama_model_chat_template(m, None)
        sampling: dict[str, float | int] = {}
        for key, wire in GGUF_SAMPLING_KEYS.items():
            raw = self.meta(f"general.sampling.{key}")
            if raw is not None:
                sampling[wire] = int(raw) if wire in ("top_k", "repeat_last_n") else float(raw)
        return ModelInfo(
            path=self.path,
            architecture=self.meta("general.architecture") or "unknown",
            name=self.meta("general.name") or Path(self.path).stem,
            basename=self.meta("general.basename"),
            size_label=self.meta("general.size_label"),
            description=desc.value.decode("utf-8", "replace"),
            n_ctx_train=llama.llama_model_n_ctx_train(m),
            n_params=llama.llama_model_n_params(m),
            size_bytes=llama.llama_model_size(m),
            n_vocab=self.n_vocab,
            n_embd=llama.llama_model_n_embd(m),
            vocab_type=llama.llama_vocab_type(self._vocab),
            chat_template=template.decode("utf-8") if template else None,
            bos_token=self.token_text(self.bos_id) if self.bos_id >= 0 else "",
            eos_token=self.token_text(self.eos_id) if self.eos_id >= 0 else "",
            add_bos=bool(llama.llama_vocab_get_add_bos(self._vocab)),
            is_hybrid=bool(llama.llama_model_is_hybrid(m)),
            is_recurrent=bool(llama.llama_model_is_recurrent(m)),
            n_swa=llama.llama_model_n_swa(m),
            gguf_sampling=sampling,
        )

    # -- vocabulary ----------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        raw = text.encode("utf-8")
        capacity = len(raw) + 8
        buf = (llama.llama_token * capacity)()
        n = llama.llama_tokenize(self._vocab, raw, len(raw), buf, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            buf = (llama.llama_token * capacity)()
            n = llama.llama_tokenize(self._vocab, raw, len(raw), buf, capacity, add_special, parse_special)
        if n < 0:
            raise EngineError(f"tokenization failed ({n})")
        return list(buf[:n])

    def tokenize_chat(self, text: str) -> list[int]:
        """Tokenize a rendered chat prompt; a template that prints BOS itself does not get a second one."""
        bos = self.info.bos_token
        return self.tokenize(text, add_special=not (bos and text.startswith(bos)), parse_special=True)

    def token_to_piece(self, token: int, *, special: bool = False) -> bytes:
        key = (token, special)
        piece = self._pieces.get(key)
        if piece is None:
            piece = self._pieces[key] = self._read_piece(token, special)
        return piece

    def all_pieces(self) -> list[bytes]:
        """Every token's bytes (special tokens spelled out), in id order; read once, not cached."""
        return [self._read_piece(token, True) for token in range(self.n_vocab)]

    def _read_piece(self, token: int, special: bool) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def token_text(self, token: int) -> str:
        """The token's text with special tokens rendered (``<|im_end|>``)."""
        return self.token_to_piece(token, special=True).decode("utf-8", "replace")

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        if not tokens:
            return ""
        arr = (llama.llama_token * len(tokens))(*tokens)
        capacity = len(tokens) * 16 + 16
        while True:
            buf = ctypes.create_string_buffer(capacity)
            n = llama.llama_detokenize(self._vocab, arr, len(tokens), buf, capacity, False, special)
            if n >= 0:
                return buf.raw[:n].decode("utf-8", "replace")
            capacity = -n

    def apply_builtin_template(self, template: str, messages: Sequence[tuple[str, str]], *, add_assistant: bool) -> str:
        """llama.cpp's built-in (non-Jinja) formatting, which recognises common templates by their text."""
        chat = (llama.llama_chat_message * len(messages))(
            *[llama.llama_chat_message(role.encode(), content.encode()) for role, content in messages]
        )
        size = 4096 + 2 * sum(len(c.encode()) for _, c in messages)
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = llama.llama_chat_apply_template(template.encode(), chat, len(messages), add_assistant, buf, size)
            if n < 0:
                raise EngineError("this chat template is not one llama.cpp knows without --jinja")
            if n <= size:
                return buf.raw[:n].decode("utf-8", "replace")
            size = n
        raise EngineError("chat template output kept growing")

    def is_eog(self, token: int) -> bool:
        return token in self._eog

    @property
    def eog_tokens(self) -> frozenset[int]:
        return self._eog

    def is_control(self, token: int) -> bool:
        """A control token: printed only when asked for special tokens (``<|im_end|>``, not ``<think>``)."""
        return bool(llama.llama_vocab_get_attr(self._vocab, token) & llama.LLAMA_TOKEN_ATTR_CONTROL)

    def is_valid_token(self, token: int) -> bool:
        return 0 <= token < self.n_vocab

    def close(self) -> None:
        if self._model:
            llama.llama_model_free(self._model)
            self._model = None


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


class NativeContext:
    """A llama_context over one model: decoding, per-sequence memory and state."""

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
    ) -> None:
        params = llama.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = min(n_ubatch, n_batch)
        params.n_seq_max = n_seq_max
        params.n_threads = n_threads
        params.n_threads_batch = n_threads_batch
        params.kv_unified = True  # one KV pool shared by all slots, as llama-server's auto -np
        params.swa_full = False  # llama-server's default: a window-sized SWA cache (checkpoints make it reusable)
        params.no_perf = True
        self._ctx = llama.llama_init_from_model(model.handle, params)
        if not self._ctx:
            raise EngineError("failed to create the llama.cpp context (out of memory?)")
        self.model = model
        self._memory = llama.llama_get_memory(self._ctx)
        self.n_ctx = llama.llama_n_ctx(self._ctx)
        self.n_ctx_seq = llama.llama_n_ctx_seq(self._ctx)
        self.n_batch = llama.llama_n_batch(self._ctx)
        self.n_seq_max = n_seq_max
        self.batch = Batch(self.n_batch)

    @property
    def handle(self) -> Any:
        return self._ctx

    def decode(self) -> None:
        """Decode the current batch; raise :class:`EngineError` on failure."""
        self.batch.struct.n_tokens = self.batch.n_tokens
        rc = llama.llama_decode(self._ctx, self.batch.struct)
        if rc != 0:
            reason = {1: "no room in the KV cache", 2: "aborted", -1: "invalid batch"}.get(rc, "fatal error")
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
            raise EngineError(f"could not save sequence {seq_id} to {path}")
        return int(written)

    def load_seq_file(self, seq_id: int, path: str, capacity: int) -> tuple[list[int], int]:
        """Restore a saved sequence into ``seq_id``; returns its tokens and the bytes read."""
        arr = (llama.llama_token * capacity)()
        count = ctypes.c_size_t(0)
        read = llama.llama_state_seq_load_file(self._ctx, path.encode(), seq_id, arr, capacity, ctypes.byref(count))
        if read == 0:
            raise EngineError(f"could not restore {path} (not a saved slot of this model, or larger than the slot)")
        return list(arr[: count.value]), int(read)

    def seq_clear(self, seq_id: int) -> None:
        if not self.seq_rm(seq_id, -1, -1):
            raise EngineError(f"could not clear sequence {seq_id}")

    def clear(self) -> None:
        llama.llama_memory_clear(self._memory, True)

    def logits(self, batch_index: int) -> npt.NDArray[np.float32]:
        """The logits row of the last decode at ``batch_index`` (a view: it changes with the next decode)."""
        return np.ctypeslib.as_array(llama.llama_get_logits_ith(self._ctx, batch_index), shape=(self.model.n_vocab,))

    def seq_pos_max(self, seq_id: int) -> int:
        return int(llama.llama_memory_seq_pos_max(self._memory, seq_id))

    def get_state(self, seq_id: int, *, partial: bool) -> StateBuffer:
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

    def set_state(self, seq_id: int, data: StateBuffer, *, partial: bool) -> None:
        flags = llama.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY if partial else 0
        if llama.llama_state_seq_set_data_ext(self._ctx, _bytes_pointer(data), data.size, seq_id, flags) != data.size:
            raise EngineError(f"state restore of sequence {seq_id} failed")

    def close(self) -> None:
        if self._ctx:
            llama.llama_free(self._ctx)
            self._ctx = None


def _bytes_pointer(buffer: StateBuffer) -> Any:
    return buffer.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))


#: ``llama_token_data``: a candidate token for the samplers.
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class Sampler:
    """One request's sampling, with llama-server's chain and order.

    logit bias -> penalties -> top-k -> typical -> top-p -> min-p -> temperature -> dist(seed). Bias and
    penalties are applied to the logits by :class:`~lfmserve.penalties.LogitAdjuster` (only the window's
    tokens change); the rest is a llama.cpp sampler chain. At temperature <= 0 the chain's answer is the
    most likely token (top-k, top-p and min-p always keep it), so greedy sampling is an argmax.
    """

    def __init__(
        self,
        model: NativeModel,
        params: SamplingParams,
        history: Sequence[int],
        n_ctx: int,
        *,
        mask: TokenMask | None = None,
        n_probs: int = 0,
    ) -> None:
        self._n_vocab = model.n_vocab
        self._mask = mask
        self._n_probs = n_probs
        #: The last sampled token's probabilities (when ``n_probs`` > 0).
        self.last_logprob: TokenLogprob | None = None
        self._adjuster = LogitAdjuster(params, n_ctx=n_ctx, eog_tokens=model.eog_tokens)
        self._chain = None
        if not (params.is_greedy and params.typical_p >= 1.0):  # typical-p may drop the most likely token
            self._chain = llama.llama_sampler_chain_init(llama.llama_sampler_chain_default_params())
            for sampler in _stochastic_samplers(params):
                llama.llama_sampler_chain_add(self._chain, sampler)
        if self._adjuster.penalised:
            for token in history[-self._adjuster.window :]:  # the window sees the prompt too, as in llama-server
                self._adjuster.accept(token)

    @property
    def grammar_finished(self) -> bool:
        return self._mask is not None and self._mask.finished

    def sample(self, ctx: NativeContext, batch_index: int, stored_logits: npt.NDArray[np.float32] | None = None) -> int:
        """The next token from the logits at ``batch_index`` (adjusted in place), or from ``stored_logits``."""
        masked = self._mask is not None and self._mask.active
        raw = None
        logits = stored_logits
        if logits is not None or self._adjuster.active or self._chain is None or masked or self._n_probs:
            if logits is None:
                logits = ctx.logits(batch_index)
            if self._n_probs:
                raw = logits.copy()  # probabilities are the model's, before bias, penalties and grammar
            self._adjuster.apply(logits)
            if masked:
                self._mask.apply(logits)  # type: ignore[union-attr]
        if self._chain is None:
            assert logits is not None  # greedy always reads the row
            token = int(np.argmax(logits))
        elif stored_logits is not None:
            token = self._sample_array(stored_logits)
        else:
            token = int(llama.llama_sampler_sample(self._chain, ctx.handle, batch_index))
        self._adjuster.accept(token)
        if self._mask is not None:
            self._mask.accept(token)
        if raw is not None:
            self.last_logprob = token_logprob(raw, token, self._n_probs)
        return token

    def _sample_array(self, logits: npt.NDArray[np.float32]) -> int:
        """What ``llama_sampler_sample`` does, for logits that are not in the context."""
        candidates = np.zeros(self._n_vocab, dtype=_TOKEN_DATA)
        candidates["id"] = np.arange(self._n_vocab, dtype=np.int32)
        candidates["logit"] = logits
        array = llama.llama_token_data_array(
            data=candidates.ctypes.data_as(ctypes.POINTER(llama.llama_token_data)),
            size=self._n_vocab,
            selected=-1,
            sorted=False,
        )
        llama.llama_sampler_apply(self._chain, ctypes.byref(array))
        token = int(array.data[array.selected].id)
        llama.llama_sampler_accept(self._chain, token)
        return token

    def close(self) -> None:
        if self._chain:
            llama.llama_sampler_free(self._chain)
            self._chain = None


def token_logprob(logits: npt.NDArray[np.float32], token: int, n_top: int) -> TokenLogprob:
    """``token``'s log-softmax and the ``n_top`` most likely tokens', most likely first."""
    peak = float(logits.max())
    log_total = peak + float(np.log(np.exp(logits - peak, dtype=np.float32).sum(dtype=np.float64)))
    n_top = min(n_top, logits.size)
    top = np.argpartition(-logits, n_top - 1)[:n_top]
    top = top[np.lexsort((top, -logits[top]))]  # by logit, ties by id
    return TokenLogprob(
        token, float(logits[token]) - log_total, tuple((int(t), float(logits[t]) - log_total) for t in top)
    )


def _stochastic_samplers(params: SamplingParams) -> list[Any]:
    samplers = []
    if params.top_k > 0:
        samplers.append(llama.llama_sampler_init_top_k(params.top_k))
    if params.typical_p < 1.0:
        samplers.append(llama.llama_sampler_init_typical(params.typical_p, 1))
    if params.top_p < 1.0:
        samplers.append(llama.llama_sampler_init_top_p(params.top_p, 1))
    if params.min_p > 0.0:
        samplers.append(llama.llama_sampler_init_min_p(params.min_p, 1))
    samplers.append(llama.llama_sampler_init_temp_ext(params.temperature, 0.0, 1.0))
    seed = llama.LLAMA_DEFAULT_SEED if params.seed < 0 else params.seed & 0xFFFFFFFF
    samplers.append(llama.llama_sampler_init_dist(seed))
    return samplers
