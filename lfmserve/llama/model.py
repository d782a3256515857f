"""A loaded GGUF: its weights, vocabulary and what it says about itself.

Thread-safe for tokenizing and reading pieces; decoding needs a :class:`~lfmserve.llama.context.NativeContext`.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import resource
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as llama

from ..errors import EngineError
from .backend import amx_built_in, buffer_sizes, captured_errors, captured_lines, failure_reason, init_backend
from .devices import ModelPlacement, model_params
from .kv_overrides import override_array
from .mapped_weights import release_copied_weights

logger = logging.getLogger(__name__)
_VOCAB_TYPES = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo2"}


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
    #: ``tokenizer.chat_template.rerank``: a reranker's prompt, ``{query}`` and ``{document}`` in it.
    rerank_template: str | None
    bos_token: str
    eos_token: str
    add_bos: bool
    add_eos: bool
    add_sep: bool
    is_hybrid: bool
    is_recurrent: bool
    n_swa: int

    @property
    def vocab_type_name(self) -> str:
        return _VOCAB_TYPES.get(self.vocab_type, str(self.vocab_type))

    def needs_checkpoints(self, *, swa_full: bool) -> bool:
        """Its memory cannot drop a tail by position alone: recurrent state, or a sliding window that keeps only
        its last ``n_swa`` cells. With ``swa_full`` (``--swa-full``) the window's layers keep every cell, so an
        attention model with a sliding window truncates as exactly as a plain one (llama-server then counts
        ``n_swa`` as 0)."""
        return self.is_hybrid or self.is_recurrent or (self.n_swa > 0 and not swa_full)

    def to_json(self) -> dict[str, Any]:
        """The model as ``/props`` describes it."""
        return {
            "architecture": self.architecture,
            "name": self.name,
            "description": self.description,
            "n_ctx_train": self.n_ctx_train,
            "n_params": self.n_params,
            "size": self.size_bytes,
            "n_vocab": self.n_vocab,
            "vocab_type": self.vocab_type_name,
            "is_hybrid": self.is_hybrid,
            "is_recurrent": self.is_recurrent,
            "n_swa": self.n_swa,
        }

    def meta_json(self, n_ctx: int) -> dict[str, Any]:
        """The model as ``/v1/models`` describes it (``meta``), served with ``n_ctx`` tokens per slot."""
        return {
            "vocab_type": self.vocab_type,
            "n_vocab": self.n_vocab,
            "n_ctx": n_ctx,
            "n_ctx_train": self.n_ctx_train,
            "n_embd": self.n_embd,
            "n_params": self.n_params,
            "size": self.size_bytes,
        }


@functools.cache
def _repack_default() -> bool:
    """Repack weights unless llama.cpp would multiply them with AMX (said once: the speed it costs is real)."""
    if amx_built_in():
        logger.warning(
            "llama.cpp was built for AMX, whose matrix multiply crashes at this llama.cpp commit (its issue 20824):"
            " weights are not repacked (--repack turns repacking and AMX back on)"
        )
        return False
    return True


def _say_unlocked(load_mode: str) -> None:
    """llama.cpp serves on unlocked when it cannot lock the weights (llama-server too); say why, once, as an error."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    limit = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft // 1024} KiB"
    logger.error(
        "-lm %s: the weights are not locked in RAM: this process may lock %s (RLIMIT_MEMLOCK); raise it (ulimit -l,"
        " docker's --ulimit memlock=-1) or grant CAP_IPC_LOCK. Serving with them unlocked, as llama-server does",
        load_mode,
        limit,
    )


#: llama.cpp's model loading modes by their ``-lm`` names (mlock fails to load where the memory lock limit is too
#: low, with llama.cpp's reason).
LOAD_MODES = {
    "auto": llama.LLAMA_LOAD_MODE_AUTO,
    "none": llama.LLAMA_LOAD_MODE_NONE,
    "mmap": llama.LLAMA_LOAD_MODE_MMAP,
    "mlock": llama.LLAMA_LOAD_MODE_MLOCK,
    "mmap+mlock": llama.LLAMA_LOAD_MODE_MMAP_MLOCK,
    "dio": llama.LLAMA_LOAD_MODE_DIRECT_IO,
}
#: llama.cpp's on-demand reading of the tensors an architecture marks (``-lzm``).
LAZY_MODES = {"off": llama.LLAMA_LAZY_MODE_OFF, "auto": llama.LLAMA_LAZY_MODE_AUTO, "on": llama.LLAMA_LAZY_MODE_ON}


class NativeModel:
    """A loaded GGUF: weights and vocabulary. Thread-safe for tokenizing; decoding needs a context."""

    def __init__(
        self,
        path: str | Path,
        *,
        placement: ModelPlacement | None = None,
        vocab_only: bool = False,
        repack: bool | None = None,
        load_mode: str = "auto",
        lazy_mode: str = "auto",
        kv_overrides: Sequence[str] = (),
        check_tensors: bool = False,
        no_alloc: bool = False,
    ) -> None:
        """``placement``: the weights' devices and buffer types (``-ngl``, ``-dev``, ``-ot``...; None: llama.cpp's
        defaults). ``repack``: let llama.cpp place weights in its extra CPU buffer types (repacked for its faster
        kernels; ``--repack`` / ``--no-repack``); None: yes, unless that would hand them to AMX, which crashes
        (:func:`.backend.amx_built_in`). ``load_mode`` / ``lazy_mode``: ``-lm`` / ``-lzm`` (:data:`LOAD_MODES`,
        :data:`LAZY_MODES`). ``kv_overrides``: ``--override-kv`` entries (``KEY=TYPE:VALUE``); ``check_tensors``:
        llama.cpp checks every tensor's data while loading. ``no_alloc``: read the metadata and plan the buffers
        without reading or allocating the weights (to measure what a load would take: ``--fit``)."""
        init_backend()
        self.path = str(path)
        problem = model_file_problem(self.path)
        if problem is not None:
            raise EngineError(problem)
        params, _held = model_params(placement)  # _held: what params points to, alive through the load
        params.vocab_only = vocab_only
        #: Whether the weights went to llama.cpp's extra buffer types (a draft model follows its target).
        self.repack = _repack_default() if repack is None else repack
        params.use_extra_bufts = self.repack
        params.load_mode = LOAD_MODES["none" if no_alloc else load_mode]  # a mapped no_alloc load aborts
        params.lazy_mode = LAZY_MODES[lazy_mode]
        params.check_tensors = check_tensors
        params.no_alloc = no_alloc
        params.kv_overrides = override_array(kv_overrides)  # params holds the array until the load returns
        with captured_errors() as errors, captured_lines() as lines:
            self._model = llama.llama_model_load_from_file(self.path.encode(), params)
        #: Bytes of the weights' buffers by llama.cpp's name for them (``CPU_Mapped``, ``CPU_REPACK``, ``CPU``).
        self.buffers = buffer_sizes(lines)
        if "mlock" in load_mode and any("failed to mlock" in line for line in lines):
            _say_unlocked(load_mode)
        if not self._model:
            raise EngineError(f"failed to load model from {self.path}: {failure_reason(errors)}")
        try:
            self._after_load(load_mode == "auto" and self.repack and not (vocab_only or no_alloc))
        except BaseException:
            self.close()  # a model loaded is freed if what follows fails: nothing else holds it yet
            raise

    def _after_load(self, release: bool) -> None:
        """What the constructor reads once the model is loaded; ``release``: give back the mapped pages of the
        weights llama.cpp copied (``-lm auto``)."""
        #: Bytes of the mapped file given back after load: lfmserve's ``auto`` holds the weights once.
        self.released_bytes = 0
        if release:
            self.released_bytes = release_copied_weights(self._model, self.path)
            logger.info(
                "released %.1f MiB of mapped weights held again in repacked buffers", self.released_bytes / 2**20
            )
        self._vocab = llama.llama_model_get_vocab(self._model)
        self.n_vocab: int = llama.llama_vocab_n_tokens(self._vocab)
        self.bos_id = llama.llama_vocab_bos(self._vocab)
        self.eos_id = llama.llama_vocab_eos(self._vocab)
        self.sep_id = llama.llama_vocab_sep(self._vocab)
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

    @property
    def tokenize_address(self) -> int | None:
        """The address of ``llama_tokenize``, for native code that tokenizes with this vocabulary (llguidance)."""
        return ctypes.cast(llama._lib.llama_tokenize, ctypes.c_void_p).value

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
        rerank_template = llama.llama_model_chat_template(m, b"rerank")
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
            rerank_template=rerank_template.decode("utf-8") if rerank_template else None,
            bos_token=self.token_text(self.bos_id) if self.bos_id >= 0 else "",
            eos_token=self.token_text(self.eos_id) if self.eos_id >= 0 else "",
            add_bos=bool(llama.llama_vocab_get_add_bos(self._vocab)),
            add_eos=bool(llama.llama_vocab_get_add_eos(self._vocab)),
            add_sep=bool(llama.llama_vocab_get_add_sep(self._vocab)),
            is_hybrid=bool(llama.llama_model_is_hybrid(m)),
            is_recurrent=bool(llama.llama_model_is_recurrent(m)),
            n_swa=llama.llama_model_n_swa(m),
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

    def fim_tokens(self) -> dict[str, int]:
        """The vocabulary's fill-in-the-middle tokens that it has, by role (``pre``, ``suf``, ``mid``, ``pad``,
        ``rep``, ``sep``): what ``/infill`` writes around the code."""
        roles = ("pre", "suf", "mid", "pad", "rep", "sep")
        ids = {role: int(getattr(llama, f"llama_vocab_fim_{role}")(self._vocab)) for role in roles}
        return {role: token for role, token in ids.items() if token >= 0}

    def token_for(self, text: str) -> int | None:
        """The id of the one token spelled ``text`` (special tokens included), or None when no token is."""
        ids = self.tokenize(text, add_special=False, parse_special=True)
        if len(ids) == 1 and self.token_to_piece(ids[0], special=True) == text.encode():
            return ids[0]
        return None

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

    def join_pieces(self, tokens: Sequence[int]) -> str:
        """The pieces of ``tokens`` (special tokens spelled out) joined as they are: llama-server's
        ``tokens_to_str``, which /detokenize answers with. Unlike :meth:`detokenize`, the vocabulary's
        clean-up of spaces (``"France ?"`` -> ``"France?"``) is not applied, so text round-trips."""
        return b"".join(self.token_to_piece(token, special=True) for token in tokens).decode("utf-8", "replace")

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        """The text of ``tokens``, which must all be vocabulary ids (llama.cpp aborts the process on others)."""
        if not tokens:
            return ""
        if not all(0 <= t < self.n_vocab for t in tokens):
            raise ValueError(f"token ids outside the vocabulary of {self.n_vocab}")
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


def builtin_template_names() -> frozenset[str]:
    """The names llama.cpp's built-in chat formats answer to (``--chat-template llama3``)."""
    n = llama.llama_chat_builtin_templates(None, 0)
    names = (ctypes.c_char_p * n)()
    llama.llama_chat_builtin_templates(names, n)
    return frozenset(name.decode() for name in names if name is not None)


def model_file_problem(path: str, what: str = "model") -> str | None:
    """Why ``path`` cannot be a GGUF ``what`` (model, projector), before llama.cpp is asked to load it
    (None: it may be one)."""
    file = Path(path)
    if file.is_dir():
        return f"{what} path is a directory, not a GGUF file: {path}"
    if not file.is_file():
        return f"{what} file not found: {path}"
    if file.stat().st_size == 0:
        return f"{what} file is empty: {path}"
    return None
