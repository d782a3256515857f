"""The sampler order: llama-server's sampler names, their aliases and one-letter codes, read into canonical names.

A request's ``samplers`` (a list of names, or a string of letters), ``--samplers a;b;c`` and ``--sampling-seq``
all become one tuple of canonical names (the ones llama-server shows in ``generation_settings.samplers``), so the
rest of lfmserve sees a single spelling. An unknown name is an error naming it (llama-server drops it with a
warning nobody sees, which silently changes the chain).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Canonical name -> one-letter code, as ``common_sampler_type_to_chr`` writes them.
CODES: dict[str, str] = {
    "dry": "d",
    "top_k": "k",
    "typ_p": "y",
    "top_p": "p",
    "top_n_sigma": "s",
    "min_p": "m",
    "temperature": "t",
    "xtc": "x",
    "infill": "i",
    "penalties": "e",
    "adaptive_p": "a",
}
#: llama-server's default chain (``common_params_sampling::samplers``).
DEFAULT_ORDER: tuple[str, ...] = (
    "penalties",
    "dry",
    "top_n_sigma",
    "top_k",
    "typ_p",
    "top_p",
    "min_p",
    "xtc",
    "temperature",
)


def _aliases() -> dict[str, str]:
    """Every spelling ``common_sampler_types_from_names`` takes: the canonical names, their kebab-case and
    underscore-less forms (``top-k``, ``topk``), and ``nucleus``, ``temp`` and ``typ``."""
    out = {name: name for name in CODES}
    for name in CODES:
        if "_" in name:
            out[name.replace("_", "-")] = name
            out[name.replace("_", "")] = name
    out.update(nucleus="top_p", temp="temperature", typ="typ_p")
    return out


_NAMES = _aliases()
_BY_CODE = {code: name for name, code in CODES.items()}


def order_from_names(names: Iterable[str]) -> tuple[str, ...]:
    """Sampler names in any of llama-server's spellings (case does not matter) as canonical names."""
    out = []
    for name in names:
        canonical = _NAMES.get(name.lower())
        if canonical is None:
            raise ValueError(f"unknown sampler {name!r} (known: {', '.join(CODES)})")
        out.append(canonical)
    return tuple(out)


def order_from_codes(codes: str) -> tuple[str, ...]:
    """A ``--sampling-seq`` string (``edskypmxt``) as canonical names."""
    unknown = [code for code in codes if code not in _BY_CODE]
    if unknown:
        raise ValueError(f"unknown sampler letter {unknown[0]!r} (known: {''.join(_BY_CODE)})")
    return tuple(_BY_CODE[code] for code in codes)


def canonical_sampling(values: Mapping[str, Any]) -> dict[str, Any]:
    """Sampling knobs as the in-process API takes them, in the form SamplingParams holds: ``samplers`` a string of
    letters (``"kpt"``) or a sequence of names, ``dry_sequence_breakers`` any sequence (kept as tuples)."""
    out = dict(values)
    if "samplers" in out:
        order = out["samplers"]
        out["samplers"] = order_from_codes(order) if isinstance(order, str) else order_from_names(order)
    if "dry_sequence_breakers" in out:
        out["dry_sequence_breakers"] = tuple(out["dry_sequence_breakers"])
    return out
