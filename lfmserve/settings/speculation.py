"""Speculative decoding: the drafters, the draft model and how drafts are verified.

One group of :class:`~lfmserve.settings.Settings` (:mod:`.groups` lists them all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .fields import KV_CACHE_TYPES, OnOffAction, ShortcutAction, flag, switch


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculationSettings:
    """Speculative decoding: which drafters guess ahead and how far (llama-server's names and defaults)."""

    TITLE: ClassVar[str] = "speculative decoding"

    spec_type: str | None = field(
        default=None,
        metadata=flag(
            "--spec-type",
            help="speculative decoding, comma-separated: ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, "
            "ngram-cache (drafts from the request's own tokens), draft-simple (a draft model; default: none)",
        ),
    )
    spec_draft_model: str | None = field(
        default=None,
        metadata=flag("--spec-draft-model", "-md", "--model-draft", help="draft model GGUF (draft-simple)"),
    )
    spec_draft_hf: str | None = field(
        default=None,
        metadata=flag(
            "--spec-draft-hf", "-hfd", "-hfrd", "--hf-repo-draft", help="draft model from Hugging Face, repo[:quant]"
        ),
    )
    spec_draft_n_max: int = field(
        default=3,
        metadata=flag("--spec-draft-n-max", help="tokens the draft model guesses per step (draft-simple)", type=int),
    )
    spec_draft_n_min: int = field(
        default=0, metadata=flag("--spec-draft-n-min", help="shorter drafts are not verified", type=int)
    )
    spec_draft_p_min: float = field(
        default=0.0,
        metadata=flag(
            "--spec-draft-p-min",
            "--draft-p-min",
            help="the draft model stops guessing below this probability (draft-simple)",
            type=float,
        ),
    )
    spec_draft_threads: int | None = field(
        default=None,
        metadata=flag(
            "-td",
            "--threads-draft",
            "--spec-draft-threads",
            help="the draft model's threads for generation (default: --threads)",
            type=int,
        ),
    )
    spec_draft_threads_batch: int | None = field(
        default=None,
        metadata=flag(
            "-tbd",
            "--threads-batch-draft",
            "--spec-draft-threads-batch",
            help="the draft model's threads for prompt processing (default: --spec-draft-threads)",
            type=int,
        ),
    )
    spec_draft_type_k: str = field(
        default="f16",
        metadata=flag(
            "-ctkd",
            "--cache-type-k-draft",
            "--spec-draft-type-k",
            help="the draft model's KV cache type for K",
            choices=KV_CACHE_TYPES,
        ),
    )
    spec_draft_type_v: str = field(
        default="f16",
        metadata=flag(
            "-ctvd",
            "--cache-type-v-draft",
            "--spec-draft-type-v",
            help="the draft model's KV cache type for V",
            choices=KV_CACHE_TYPES,
        ),
    )
    spec_synth_len: float | None = field(
        default=None,
        metadata=flag(
            "--spec-synth-len",
            help="mean synthetic acceptance length, the target token included (drafts kept by chance: benchmarking)",
            type=float,
        ),
    )
    spec_synth_rates: str | None = field(
        default=None,
        metadata=flag(
            "--spec-synth-rates",
            help="comma-separated chances of keeping each draft position whatever the model says (benchmarking)",
        ),
    )
    spec_exact: bool = switch(
        "--spec-exact",
        "--no-spec-exact",
        help="verify drafts only in batches llama.cpp's kernels compute as they compute a token alone, so greedy "
        "output is the same with and without drafts; the size is measured at startup and said in one line (3 on "
        "CPUs that repack weights: drafts of 2 tokens at most, and speculation is off where no batch that small "
        "pays). Off (the default): drafts are verified in batches of any size, as llama-server verifies them: "
        "faster, and near ties can go either way",
        default=False,
        action=OnOffAction,
    )
    spec_default: bool = field(
        default=False,
        metadata=flag(
            "--spec-default",
            help="enable default speculative decoding config, as llama-server's: adds ngram-mod to --spec-type and "
            "sets its sizes to 24 / 48 / 64 where it stands (a --spec-ngram-mod-* flag after it wins, one before "
            "it is overridden)",
            action=ShortcutAction,
            sets={"spec_ngram_mod_n_match": 24, "spec_ngram_mod_n_min": 48, "spec_ngram_mod_n_max": 64},
        ),
    )
    spec_ngram_simple_size_n: int = field(
        default=12, metadata=flag("--spec-ngram-simple-size-n", help="tokens looked up (ngram-simple)", type=int)
    )
    spec_ngram_simple_size_m: int = field(
        default=48, metadata=flag("--spec-ngram-simple-size-m", help="most tokens drafted (ngram-simple)", type=int)
    )
    spec_ngram_simple_min_hits: int = field(
        default=1,
        metadata=flag("--spec-ngram-simple-min-hits", help="accepted as llama-server's (unused there too)", type=int),
    )
    spec_ngram_map_k_size_n: int = field(
        default=12, metadata=flag("--spec-ngram-map-k-size-n", help="tokens looked up (ngram-map-k)", type=int)
    )
    spec_ngram_map_k_size_m: int = field(
        default=48, metadata=flag("--spec-ngram-map-k-size-m", help="most tokens drafted (ngram-map-k)", type=int)
    )
    spec_ngram_map_k_min_hits: int = field(
        default=1, metadata=flag("--spec-ngram-map-k-min-hits", help="accepted as llama-server's", type=int)
    )
    spec_ngram_map_k4v_size_n: int = field(
        default=12, metadata=flag("--spec-ngram-map-k4v-size-n", help="tokens looked up (ngram-map-k4v)", type=int)
    )
    spec_ngram_map_k4v_size_m: int = field(
        default=48, metadata=flag("--spec-ngram-map-k4v-size-m", help="most tokens drafted (ngram-map-k4v)", type=int)
    )
    spec_ngram_map_k4v_min_hits: int = field(
        default=1,
        metadata=flag("--spec-ngram-map-k4v-min-hits", help="sightings of a key before it drafts", type=int),
    )
    spec_ngram_mod_n_match: int = field(
        default=24, metadata=flag("--spec-ngram-mod-n-match", help="tokens hashed (ngram-mod)", type=int)
    )
    spec_ngram_mod_n_min: int = field(
        default=48, metadata=flag("--spec-ngram-mod-n-min", help="shortest draft (ngram-mod)", type=int)
    )
    spec_ngram_mod_n_max: int = field(
        default=64, metadata=flag("--spec-ngram-mod-n-max", help="longest draft (ngram-mod)", type=int)
    )

    @property
    def synth_rate_values(self) -> tuple[float, ...]:
        """``--spec-synth-rates`` as numbers; raises ValueError naming a value that is not one."""
        values = []
        for part in (self.spec_synth_rates or "").split(","):
            if part.strip():
                try:
                    values.append(float(part))
                except ValueError:
                    raise ValueError(f"--spec-synth-rates: invalid value {part.strip()!r}") from None
        return tuple(values)
