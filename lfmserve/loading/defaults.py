"""Where a model's sampling defaults come from: the command line, the GGUF, the LFM family table, llama-server.

A request's sampling field wins; otherwise the first of these that sets it: the CLI flags, the GGUF's
``general.sampling.*`` keys, the LFM family table (the seed's validated values, matched from the
model's name), and llama-server's own defaults (:class:`~lfmserve.engine.records.SamplingParams`'
field defaults). :func:`resolve_defaults` returns the effective defaults together with the source of
each, so the startup log and ``/props`` can name them.

"—" in the family table means the sampler is not used by that family (top-p 1.0, min-p 0.0, top-k 0),
which reproduces the model cards' generation settings.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..engine.records import ResolvedDefaults, SamplingParams
from ..sampler_order import order_from_names

logger = logging.getLogger(__name__)

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

#: GGUF ``general.sampling.<key>`` -> sampling field.
GGUF_SAMPLING_KEYS: dict[str, str] = {
    "temp": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "penalty_repeat": "repeat_penalty",
    "penalty_last_n": "repeat_last_n",
    "xtc_probability": "xtc_probability",
    "xtc_threshold": "xtc_threshold",
    "mirostat": "mirostat",
    "mirostat_tau": "mirostat_tau",
    "mirostat_eta": "mirostat_eta",
}
#: llama-server's defaults (``common/common.h``): the field defaults of SamplingParams.
LLAMA_SERVER_DEFAULTS = SamplingParams()
#: The fields a default can be set for (logit bias and ignore_eos are the request's alone).
DEFAULTABLE = tuple(f.name for f in dataclasses.fields(SamplingParams) if f.name not in ("logit_bias", "ignore_eos"))


def gguf_sampling(meta: Callable[[str], str | None]) -> dict[str, Any]:
    """The sampling defaults a GGUF's ``general.sampling.*`` keys set, read with ``meta(key)``; the order
    (``sequence``, names separated by ``;``) is skipped with a warning when it names an unknown sampler."""
    out: dict[str, Any] = {}
    for key, name in GGUF_SAMPLING_KEYS.items():
        raw = meta(f"general.sampling.{key}")
        if raw is not None:
            out[name] = int(raw) if isinstance(getattr(LLAMA_SERVER_DEFAULTS, name), int) else float(raw)
    sequence = meta("general.sampling.sequence")
    if sequence:
        try:
            out["samplers"] = order_from_names(name for name in sequence.split(";") if name)
        except ValueError as exc:
            logger.warning("general.sampling.sequence %r is not used: %s", sequence, exc)
    return out


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
    values: dict[str, Any] = {}
    sources = {name: "llama-server default" for name in DEFAULTABLE}
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
    return ResolvedDefaults(LLAMA_SERVER_DEFAULTS.updated(values), sources, matched[0] if matched else None)
