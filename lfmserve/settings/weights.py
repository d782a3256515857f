"""The weights: how llama.cpp reads, lays out, checks and first runs them (llama-server's loading flags).

A group of :class:`~lfmserve.settings.Settings` like those of :mod:`.groups`: the loader reads it to load the model
(:func:`~lfmserve.loading.model_load.load_model`), and the engine's ``--warmup`` run follows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .fields import LAZY_MODES, LOAD_MODES, OnOffAction, flag, switch


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightSettings:
    """How the model file becomes weights in memory."""

    TITLE: ClassVar[str] = "loading the weights"

    repack: bool | None = switch(
        "--repack",
        "-nr",
        "--no-repack",
        help="weights repacked into llama.cpp's faster CPU layouts (default: on, but off where llama.cpp was built "
        "for AMX, whose matrix multiply crashes: llama.cpp issue 20824)",
        default=None,
        action=OnOffAction,
    )
    load_mode: str = field(
        default="auto",
        metadata=flag(
            "-lm",
            "--load-mode",
            help="how the weights are loaded: auto (mmap, and the pages of the weights llama.cpp repacks given back, "
            "so they are held once), none (read into memory), mmap, mlock (read and locked in RAM), mmap+mlock, dio "
            "(direct I/O); docs/usage.md says what each costs",
            choices=LOAD_MODES,
        ),
    )
    lazy_mode: str = field(
        default="auto",
        metadata=flag(
            "-lzm",
            "--lazy-mode",
            help="read the rows of tensors an architecture marks (per-layer embeddings) on demand: on, off, or auto "
            "(only those over 4 GiB); needs mmap",
            choices=LAZY_MODES,
        ),
    )
    no_mmap: bool = switch(
        "--no-mmap",
        help="llama-server's older spelling of -lm none (with --mlock: -lm mlock)",
        default=False,
        action="store_true",
    )
    mlock: bool = switch(
        "--mlock",
        help="llama-server's older spelling of -lm mmap+mlock (with --no-mmap: -lm mlock)",
        default=False,
        action="store_true",
    )
    override_kv: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "--override-kv",
            help="GGUF metadata replaced at load: KEY=TYPE:VALUE with TYPE int, float, bool or str "
            "(comma-separated, repeatable; checked as the model loads), e.g. tokenizer.ggml.add_bos_token=bool:false",
            action="append",
            metavar="KEY=TYPE:VALUE,...",
        ),
    )
    check_tensors: bool = switch(
        "--check-tensors",
        help="check every tensor's data (NaN, infinities) while loading",
        default=False,
        action="store_true",
    )
    warmup: bool = switch(
        "--warmup",
        "--no-warmup",
        help="run the model once on two tokens before serving, as llama-server does, so the first request does not "
        "pay for first touches (pages of the weights, buffers)",
        default=True,
        action=OnOffAction,
    )

    @property
    def model_load_mode(self) -> str:
        """``-lm``, or, while it is left at auto, what llama-server's older ``--no-mmap`` / ``--mlock`` ask for."""
        if self.load_mode != "auto" or not (self.no_mmap or self.mlock):
            return self.load_mode
        if self.no_mmap:
            return "mlock" if self.mlock else "none"
        return "mmap+mlock"
