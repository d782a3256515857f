"""Where the model comes from: ``-m`` or ``-hf`` and its files, the hub's flags, LoRA adapters.

One group of :class:`~lfmserve.settings.Settings` (:mod:`.groups` lists them all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .fields import OnOffAction, flag, switch


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceSettings:
    """Which model is served, where it comes from, and the names clients see it by."""

    TITLE: ClassVar[str] = "model source"

    model: str | None = field(default=None, metadata=flag("-m", "--model", help="path to a GGUF model file"))
    hf_repo: str | None = field(
        default=None,
        metadata=flag(
            "-hf",
            "-hfr",
            "--hf-repo",
            help="Hugging Face repo[:quant] to download the GGUF from (default quant Q4_K_M; with neither -m nor -hf, "
            "lfmserve is a router: see the router section)",
        ),
    )
    hf_file: str | None = field(
        default=None, metadata=flag("-hff", "--hf-file", help="file in the -hf repo (overrides the quant)")
    )
    offline: bool = switch(
        "--offline", help="use only the Hugging Face cache: no network (-hf, -hfd)", default=False, action="store_true"
    )
    hf_token: str | None = field(
        default=None,
        repr=False,
        metadata=flag(
            "-hft",
            "--hf-token",
            help="Hugging Face access token for gated and private repos (-hf, -hfd)",
            environment=("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"),
            secret=True,
        ),
    )
    mmproj: str | None = field(
        default=None, metadata=flag("-mm", "--mmproj", help="multimodal projector GGUF (images, audio)")
    )
    mmproj_auto: bool = switch(
        "--mmproj-auto",
        "--no-mmproj",
        "--no-mmproj-auto",
        help="with -hf, also fetch the repo's projector when it has one (default; --no-mmproj: text only)",
        default=True,
        action=OnOffAction,
    )
    alias: str | None = field(
        default=None,
        metadata=flag(
            "-a",
            "--alias",
            help="model names for the API, comma-separated; the id is the first in sorted order (default: file name)",
        ),
    )
    tags: str | None = field(
        default=None, metadata=flag("--tags", help="model tags, comma-separated (shown by /v1/models)")
    )
    lora: tuple[str, ...] = field(
        default=(),
        metadata=flag("--lora", help="LoRA adapter GGUF at scale 1 (repeatable, or comma-separated)", action="append"),
    )
    lora_scaled: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "--lora-scaled",
            help="LoRA adapter GGUF at a scale: FILE:SCALE (comma-separated), or FILE SCALE (repeatable)",
            action="append",
        ),
    )
    lora_init_without_apply: bool = switch(
        "--lora-init-without-apply",
        help="load the LoRA adapters at scale 0 (set their scales with POST /lora-adapters or per request)",
        default=False,
        action="store_true",
    )

    @property
    def aliases(self) -> tuple[str, ...]:
        """``--alias``'s names, sorted and without repeats (llama-server keeps them in a ``std::set``)."""
        return _comma_set(self.alias)

    @property
    def tag_list(self) -> tuple[str, ...]:
        return _comma_set(self.tags)

    @property
    def lora_adapters(self) -> tuple[tuple[str, float], ...]:
        """Each adapter file and its starting scale: ``--lora`` ones first, then ``--lora-scaled`` ones (0 with
        ``--lora-init-without-apply``). Raises ValueError for a ``--lora-scaled`` entry without a number."""
        adapters = [(path, 1.0) for value in self.lora for path in _comma_list(value)]
        for value in self.lora_scaled:
            for item in _comma_list(value):
                path, _, scale = item.rpartition(":")
                try:
                    adapters.append((path, float(scale)))
                except ValueError:
                    raise ValueError(f"--lora-scaled {item!r}: expected FILE:SCALE") from None
                if not path:
                    raise ValueError(f"--lora-scaled {item!r}: expected FILE:SCALE")
        if self.lora_init_without_apply:
            return tuple((path, 0.0) for path, _ in adapters)
        return tuple(adapters)


def _comma_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _comma_set(value: str | None) -> tuple[str, ...]:
    return tuple(sorted({part.strip() for part in (value or "").split(",") if part.strip()}))
