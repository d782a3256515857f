"""The sampling defaults a request leaves to the server, and the fields that are such defaults.

One group of :class:`~lfmserve.settings.Settings` (:mod:`.groups` lists them all).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .fields import flag, flag_spec, switch
from .sampler_flags import (
    OneGrammar,
    StoreGiven,
    breakers_argv,
    dry_base,
    finite_float,
    fold_breakers,
    int_at_least,
    json_schema,
    json_schema_file,
    logit_bias,
    logit_bias_argv,
    read_text,
    sampler_codes,
    sampler_names,
    samplers_argv,
)


def _default(*names: str, help: str, **kwargs: Any) -> Any:
    """A sampling default's field: None (not set) unless given, for the request field of the same name."""
    return field(default=None, metadata=flag(*names, help=help, sampling=True, **kwargs))


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingSettings:
    """Defaults for what a request does not set; None leaves the choice to the GGUF, the LFM family table or
    llama-server. Then what every request gets besides its own stop strings and biases (-r, -l, --ignore-eos), the
    grammar a request without one follows (--grammar or --json-schema, each also from a file: the later given wins,
    as llama-server keeps one grammar), and --keep."""

    TITLE: ClassVar[str] = "sampling defaults"

    temperature: float | None = _default("--temp", "--temperature", help="default temperature", type=float)
    dynatemp_range: float | None = _default(
        "--dynatemp-range", help="default dynamic temperature range (0.0 = off)", type=float
    )
    dynatemp_exponent: float | None = _default(
        "--dynatemp-exp", help="default dynamic temperature exponent (1.0)", type=float
    )
    top_k: int | None = _default("--top-k", help="default top-k (0 = off)", type=int)
    top_p: float | None = _default("--top-p", help="default top-p (1.0 = off)", type=float)
    min_p: float | None = _default("--min-p", help="default min-p (0.0 = off)", type=float)
    top_n_sigma: float | None = _default(
        "--top-nsigma", "--top-n-sigma", help="default top-n-sigma (-1.0 = off)", type=float
    )
    xtc_probability: float | None = _default(
        "--xtc-probability", help="default XTC probability (0.0 = off)", type=float
    )
    xtc_threshold: float | None = _default("--xtc-threshold", help="default XTC threshold (0.1; 1.0 = off)", type=float)
    typical_p: float | None = _default(
        "--typical", "--typical-p", help="default locally typical p (1.0 = off)", type=float
    )
    repeat_penalty: float | None = _default("--repeat-penalty", help="default repeat penalty (1.0 = off)", type=float)
    repeat_last_n: int | None = _default(
        "--repeat-last-n",
        help="default penalty window (64; 0 = off, -1 = context)",
        type=int_at_least(-1, "repeat-last-n"),
    )
    presence_penalty: float | None = _default(
        "--presence-penalty", help="default presence penalty (0.0 = off; finite)", type=finite_float
    )
    frequency_penalty: float | None = _default(
        "--frequency-penalty", help="default frequency penalty (0.0 = off; finite)", type=finite_float
    )
    dry_multiplier: float | None = _default("--dry-multiplier", help="default DRY multiplier (0.0 = off)", type=float)
    dry_base: float | None = _default(
        "--dry-base", help="default DRY base (1.75; a value below 1.0 is ignored)", type=dry_base, action=StoreGiven
    )
    dry_allowed_length: int | None = _default(
        "--dry-allowed-length", help="default longest repeat DRY allows (2)", type=int
    )
    dry_penalty_last_n: int | None = _default(
        "--dry-penalty-last-n",
        help="default DRY window (64; 0 = off)",
        type=int_at_least(0, "dry-penalty-last-n"),
    )
    dry_sequence_breakers: tuple[str, ...] | None = _default(
        "--dry-sequence-breaker",
        help='a default DRY sequence breaker, replacing the default ones (\\n : " *) (repeatable; none: no breakers)',
        action="append",
        write=breakers_argv,
    )
    mirostat: int | None = _default(
        "--mirostat", help="default Mirostat: 0 off, 1 Mirostat, 2 Mirostat 2.0", type=int, choices=(0, 1, 2)
    )
    mirostat_tau: float | None = _default(
        "--mirostat-ent", help="default Mirostat target entropy tau (5.0)", type=float
    )
    mirostat_eta: float | None = _default("--mirostat-lr", help="default Mirostat learning rate eta (0.1)", type=float)
    adaptive_target: float | None = _default(
        "--adaptive-target", help="default adaptive-p target probability (0.0 to 1.0; negative = off)", type=float
    )
    adaptive_decay: float | None = _default(
        "--adaptive-decay", help="default adaptive-p decay (0.0 to 0.99; 0.9)", type=float
    )
    samplers: tuple[str, ...] | None = _default(
        "--samplers",
        help="default sampler chain: names separated by ';' (top_k;temp;min_p), or --sampling-seq: one letter each "
        "(ktm); an unknown name or letter is an error",
        type=sampler_names,
        write=samplers_argv,
        also=(
            flag(
                "--sampler-seq",
                "--sampling-seq",
                help="default sampler chain, one letter each (edskypmxt): see --samplers",
                type=sampler_codes,
                metavar="SEQUENCE",
            ),
        ),
    )
    seed: int | None = _default("-s", "--seed", help="default seed (-1 = random)", type=int)
    n_predict: int = field(
        default=-1,
        metadata=flag(
            "-n", "--n-predict", "--predict", help="default max tokens to generate (-1 = until the end)", type=int
        ),
    )
    n_keep: int = field(
        default=0,
        metadata=flag(
            "--keep",
            help="tokens of the prompt kept when the context shifts (-1 = all)",
            type=int_at_least(-1, "keep"),
        ),
    )
    reverse_prompt: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "-r",
            "--reverse-prompt",
            help="a stop string every request has besides its own (repeatable)",
            action="append",
        ),
    )
    stop: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "--stop",
            help="a default stop string, taken as written: a request that gives none of its own gets these "
            "(repeatable; Ollama's stop parameter)",
            action="append",
        ),
    )
    escape: bool = switch(
        "-e",
        "--escape",
        help="read \\n, \\r, \\t, \\', \\\", \\\\ and \\xHH in -r and --dry-sequence-breaker values as the characters",
        default=True,
    )
    ignore_eos: bool = switch(
        "--ignore-eos",
        help="every request goes on past end of generation tokens (as if biased to -inf)",
        default=False,
        action="store_true",
    )
    logit_bias: tuple[tuple[int, float], ...] = field(
        default=(),
        metadata=flag(
            "-l",
            "--logit-bias",
            help="a bias every request adds to a token's logit: 15043+1, 15043-1.5, 15043-inf bans it (repeatable)",
            type=logit_bias,
            action="append",
            metavar="TOKEN_ID(+/-)BIAS",
            write=logit_bias_argv,
        ),
    )
    grammar: str | None = field(
        default=None,
        metadata=flag(
            "--grammar",
            help="GBNF grammar every request's output follows unless it gives its own (--grammar-file: from a file)",
            action=OneGrammar,
            clears="json_schema",
            also=(
                flag(
                    "--grammar-file",
                    help="file to read --grammar from (read at start)",
                    type=read_text,
                    action=OneGrammar,
                    clears="json_schema",
                    metavar="FNAME",
                ),
            ),
        ),
    )
    json_schema: str | None = field(
        default=None,
        metadata=flag(
            "-j",
            "--json-schema",
            help="JSON schema every request's output follows unless it gives its own, kept as its text "
            "(-jf: from a file, read at start)",
            type=json_schema,
            action=OneGrammar,
            clears="grammar",
            metavar="SCHEMA",
            also=(
                flag(
                    "-jf",
                    "--json-schema-file",
                    help="file to read --json-schema from (read at start)",
                    type=json_schema_file,
                    action=OneGrammar,
                    clears="grammar",
                    metavar="FILE",
                ),
            ),
        ),
    )
    backend_sampling: bool = switch(
        "-bs",
        "--backend-sampling",
        help="accepted for llama-server's scripts (sampling runs on the CPU either way)",
        default=False,
        action="store_true",
    )

    def __post_init__(self) -> None:
        if self.dry_sequence_breakers is not None:  # "none" drops the breakers given before it
            object.__setattr__(self, "dry_sequence_breakers", fold_breakers(self.dry_sequence_breakers))
        if self.grammar is not None and self.json_schema is not None:
            raise ValueError(  # only LFMSERVE_GRAMMAR with LFMSERVE_JSON_SCHEMA: a flag unsets the other
                "grammar and json_schema are both set: give one, as llama-server keeps one grammar (on the command "
                "line, the later of --grammar and --json-schema wins)"
            )

    def defaults(self) -> dict[str, Any]:
        """The sampling defaults set here (on the command line), by request field name."""
        return {name: getattr(self, name) for name in sampling_fields() if getattr(self, name) is not None}

    @property
    def json_schema_value(self) -> dict[str, Any] | bool | None:
        """``--json-schema``'s schema, parsed (it was checked when read)."""
        return None if self.json_schema is None else json.loads(self.json_schema)


def sampling_fields() -> tuple[str, ...]:
    """The fields that are sampling defaults (named as the request fields they default)."""
    return tuple(f.name for f in dataclasses.fields(SamplingSettings) if flag_spec(f).sampling)
