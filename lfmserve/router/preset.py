"""llama-server's model presets (``--models-preset FILE``): an INI file whose ``[*]`` section applies to every
model and whose other sections are models, each key a flag.

Besides flags, a section may hold the keys that only the router reads: ``load-on-startup``, ``stop-timeout``
(seconds a model is given to exit before it is killed, default 10), ``ttl`` (lfmserve's: idle seconds before the
model is unloaded) and ``dedup-cache-models`` (the cache entries a preset model comes from are left out of the
list). Their values are checked as the file is read: a switch is true or false, seconds are a finite number, 0 or
more, so a mistake stops the router naming its section rather than a model kept for ever by ``ttl = inf``. Keys
written before the first section form a model named ``default``, as in llama-server.

Example::

    [*]
    ctx-size = 8192

    [vision]
    model = /models/LFM2-VL-1.6B-Q4_K_M.gguf
    mmproj = /models/mmproj-LFM2-VL-1.6B-F16.gguf
    alias = lfm-vl
    load-on-startup = true
"""

from __future__ import annotations

import configparser
import math
from dataclasses import dataclass

from ..errors import LfmError
from ..loading.hub import quant_tag
from ..settings.argv import switch_value
from ..settings.ini import DEFAULT_SECTION, GLOBAL_SECTION, read_ini

#: Keys of a section that are not flags: the router's own, the switches and the seconds.
_SWITCH_KEYS = ("load-on-startup", "dedup-cache-models")
_SECONDS_KEYS = ("stop-timeout", "ttl")


@dataclass(frozen=True, slots=True)
class PresetSection:
    """One model's section: its flag entries (key -> raw value, in file order) and the router's keys."""

    name: str
    flags: dict[str, str]
    router: dict[str, str]


def read_preset(path: str) -> tuple[PresetSection, list[PresetSection]]:
    """The ``[*]`` section (empty when absent) and the model sections of the file at ``path``."""
    try:
        sections = read_ini(path)
    except (OSError, configparser.Error) as exc:
        raise LfmError(f"cannot read the models preset {path}: {exc}") from exc
    everyone = PresetSection(GLOBAL_SECTION, {}, {})
    models: list[PresetSection] = []
    for name, entries in sections.items():
        router = {key: value for key, value in entries.items() if key in _SWITCH_KEYS + _SECONDS_KEYS}
        for key, value in router.items():
            _check_router_key(canonical_name(name), key, value)
        section = PresetSection(
            canonical_name(name), {key: value for key, value in entries.items() if key not in router}, router
        )
        if name == GLOBAL_SECTION:
            everyone = section
        elif entries or name != DEFAULT_SECTION:
            models.append(section)
    return everyone, models


def _check_router_key(section: str, key: str, value: str) -> None:
    """Refuse a router key's value that is not what the key takes (the catalog then reads it without a doubt)."""
    if key in _SWITCH_KEYS:
        if switch_value(value) is None:
            raise LfmError(f"preset '{section}': {key} = {value!r}: not true or false")
        return
    try:
        seconds = float(value)
    except ValueError:
        raise LfmError(f"preset '{section}': {key} = {value!r} is not a number") from None
    if not (math.isfinite(seconds) and seconds >= 0):
        raise LfmError(f"preset '{section}': {key} = {value!r} is not a number of seconds, 0 or more")


def canonical_name(name: str) -> str:
    """``org/repo:q4_k_m`` -> ``org/repo:Q4_K_M`` (llama-server upper-cases a section's quant tag)."""
    if name == GLOBAL_SECTION or ":" not in name:
        return name
    head, _, tag = name.rpartition(":")
    return f"{head}:{quant_tag(tag) or tag.upper()}"


def to_ini(name: str, entries: dict[str, str]) -> str:
    """A section as llama-server writes it in ``status.preset``."""
    lines = [f"[{name}]", *(f"{key} = {value}" for key, value in entries.items())]
    return "\n".join(lines) + "\n\n"
