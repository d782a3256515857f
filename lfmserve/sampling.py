"""Sampling parameters and where their defaults come from.

A request's sampling field wins; otherwise the first of these that sets it: the CLI flags, the GGUF's
``general.sampling.*`` keys, the LFM family table (the seed's validated values, matched from the
model's name), and llama-server's own defaults. :func:`resolve_defaults` returns the effective
defaults together with the source of each, so the startup log and ``/props`` can name them.

"—" in the family table means the sampler is not used by that family (top-p 1.0, min-p 0.0, top-k 0),
which reproduces the model cards' generation settings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

#: llama-server's defaults (common/common.h), used for models outside the family table.
LLAMA_SERVER_DEFAULTS: dict[str, Any] = {
    "temperature": 0.8,
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.05,
    "typical_p": 1.0,
    "repeat_penalty": 1.0,
    "repeat_last_n": 64,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "seed": -1,
}

_OFF = {"top_k": 0, "top_p": 1.0, "min_p": 0.0}


def _family(temperature: float, repeat_penalty: float, **on: float | int) -> dict[str, Any]:
    return {**_OFF, "temperature": temperature, "repeat_penalty": repeat_penalty, **on}


#: (family, pattern over the normalized model identity, defaults); the first match wins.
LFM_FAMILIES: tuple[tuple[str, re.Pattern[str], dict[str, Any]], ...] = (
    ("LFM2-VL, LFM2.5-VL", re.compile(r"lfm2(\.5)?-vl"), _family(0.1, 1.05, min_p=0.15)),
    ("LFM2.5-1.2B-Thinking", re.compile(r"lfm2\.5-.*thinking"), _family(0.1, 1.05, top_k=50, top_p=0.1)),
    ("LFM2.5-8B-A1B", re.compile(r"lfm2\.5-8b-a1b"), _family(0.2, 1.05, top_k=80)),
    ("LFM2-24B-A2B", re.compile(r"lfm2(\.5)?-24b-a2b"), _family(0.1, 1.05, top_k=50)),
    ("LFM2.5-1.2B-Instruct", re.compile(r"lfm2\.5-1\.2b-instruct"), _family(0.1, 1.05, top_k=50)),
    ("LFM2 text, LFM2.5-JP", re.compile(r"lfm2(\.5-.*jp|-)"), _family(0.3, 1.05, min_p=0.15)),
)

#: GGUF ``general.sampling.<key>`` -> request field name.
GGUF_SAMPLING_KEYS: dict[str, str] = {
    "temp": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "penalty_repeat": "repeat_penalty",
    "penalty_last_n": "repeat_last_n",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    """One request's sampler chain settings (llama-server's wire names and meanings)."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int = -1
    #: (token id, bias) pairs; ``-inf`` bans the token.
    logit_bias: tuple[tuple[int, float], ...] = ()
    ignore_eos: bool = False

    @property
    def is_greedy(self) -> bool:
        return self.temperature <= 0.0

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["logit_bias"] = [list(pair) for pair in self.logit_bias]
        return out

    def updated(self, overrides: Mapping[str, Any]) -> SamplingParams:
        """A copy with the given (already validated) fields replaced; None values are skipped."""
        names = {f.name for f in fields(self)}
        return replace(self, **{k: v for k, v in overrides.items() if k in names and v is not None})


@dataclass(frozen=True, slots=True)
class ResolvedDefaults:
    """The effective defaults and, per field, which layer set it."""

    params: SamplingParams
    sources: dict[str, str] = field(default_factory=dict)
    family: str | None = None


def model_identity(*names: str | None) -> str:
    """Lower-case, dash-joined identity used for family matching ("LFM2.5 1.2B Instruct" -> ...)."""
    text = "-".join(n for n in names if n)
    return re.sub(r"[\s_]+", "-", text.strip().lower())


def match_family(identity: str) -> tuple[str, dict[str, Any]] | None:
    for family, pattern, values in LFM_FAMILIES:
        if pattern.search(identity):
            return family, values
    return None


def resolve_defaults(*, cli: Mapping[str, Any], gguf_sampling: Mapping[str, Any], identity: str) -> ResolvedDefaults:
    """Layer the defaults: CLI > GGUF ``general.sampling.*`` > LFM family table > llama-server."""
    values = dict(LLAMA_SERVER_DEFAULTS)
    sources = {name: "llama-server default" for name in values}
    matched = match_family(identity)
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if matched:
        layers.append((f"LFM family table ({matched[0]})", matched[1]))
    layers.append(("GGUF general.sampling", gguf_sampling))
    layers.append(("command line", cli))
    for source, layer in layers:
        for name, value in layer.items():
            values[name] = value
            sources[name] = source
    return ResolvedDefaults(SamplingParams().updated(values), sources, matched[0] if matched else None)
