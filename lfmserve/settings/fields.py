"""How a settings field carries its command line: its flags, help and argparse options live in its metadata.

Every group in :mod:`.groups` declares its fields with :func:`flag` and :func:`switch`, so a flag's spellings,
default and help are written once, next to the field, and the parser, ``--help``, ``docs/cli.md`` and
:func:`~lfmserve.settings.argv.to_argv` all read them from there.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .llama_server import option_of

DEFAULT_HF_REPO = "LiquidAI/LFM2.5-1.2B-Instruct-GGUF:Q4_K_M"
#: The KV cache types llama-server takes for ``-ctk`` / ``-ctv``.
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
#: llama.cpp's ``-lm`` model loading modes and ``-lzm`` lazy modes (lfmserve.llama.model maps them to its enums).
LOAD_MODES = ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")
LAZY_MODES = ("on", "auto", "off")
#: A size: a decimal number (``6442450944``, ``1.5``, ``6e9``), then an optional power-of-1024 unit, with or
#: without ``B`` / ``iB``.
_SIZE = re.compile(r"((?:\d+(?:\.\d*)?|\.\d+)(?:E[+-]?\d+)?)([KMGT]?)(?:I?B)?")
_SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


#: The argparse options a field's flags may take (``clears`` and ``sets``: lfmserve's own actions').
ARGPARSE_OPTIONS = frozenset({"type", "action", "metavar", "choices", "nargs", "clears", "sets"})


@dataclass(frozen=True, slots=True)
class FlagSpec:
    """A field's command line, as :func:`flag` writes it into the field's metadata (read with :func:`flag_spec`)."""

    flags: tuple[str, ...]
    help: str
    sampling: bool = False
    environment: tuple[str, ...] = ()
    secret: bool = False
    also: tuple[FlagSpec, ...] = ()
    write: Callable[[Any], Sequence[str]] | None = None
    argparse: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.argparse) - ARGPARSE_OPTIONS
        if unknown:  # a misspelled option fails when the settings are imported, not at the first parse
            raise TypeError(f"{self.flags[0]}: unknown flag options {sorted(unknown)}")


def flag(
    *names: str,
    help: str,
    sampling: bool = False,
    environment: tuple[str, ...] = (),
    secret: bool = False,
    also: tuple[Mapping[str, FlagSpec], ...] = (),
    write: Callable[[Any], Sequence[str]] | None = None,
    **argparse_kwargs: Any,
) -> dict[str, FlagSpec]:
    """Field metadata: its flags and help; ``sampling`` marks a default for the request field of the same name;
    ``environment`` names variables read after ``LFMSERVE_<FIELD>`` (llama-server's, such as ``LLAMA_API_KEY``);
    ``secret`` marks a value that no listing, log line or child's command line may show (such a field is also
    declared ``repr=False``: a test checks every one). ``also`` holds other spellings that set the field from
    another form of value, each a ``flag(...)`` with its own argparse options (``--sampling-seq kt`` beside
    ``--samplers top_k;temp``): the later given wins, and the variables, presets' field keys and
    :meth:`~lfmserve.settings.Settings.to_argv` use the field's own flags. ``write`` gives the values to_argv writes
    after the longest of them (default: the value, or each item of a repeatable flag's)."""
    spec = FlagSpec(
        names, help, sampling, environment, secret, tuple(other[_KEY] for other in also), write, argparse_kwargs
    )
    return {_KEY: spec}


def flag_spec(f: dataclasses.Field[Any]) -> FlagSpec:
    """The command line of a settings field (:func:`flag`)."""
    spec = f.metadata[_KEY]
    assert isinstance(spec, FlagSpec), f.name
    return spec


_KEY = "lfmserve.flag"


def switch(*names: str, help: str, default: bool | None, action: Any = argparse.BooleanOptionalAction) -> Any:
    """A boolean field and its flags (``--x`` / ``--no-x`` unless ``action`` says otherwise); a None default is
    decided where the field is used."""
    return field(default=default, metadata=flag(*names, help=help, action=action))


@functools.cache
def physical_cores() -> int:
    """Physical cores (llama-server's default thread count), counted from sysfs; logical as fallback. Counted once
    per process: it is the default of ``--threads``, so every settings object built (a router builds one for each
    child's command line) would otherwise read two sysfs files per CPU."""
    cores: set[tuple[str, str]] = set()
    base = "/sys/devices/system/cpu"
    try:
        for name in os.listdir(base):
            topo = os.path.join(base, name, "topology")
            if name.startswith("cpu") and name[3:].isdigit() and os.path.isdir(topo):
                with (
                    open(os.path.join(topo, "physical_package_id")) as pkg,
                    open(os.path.join(topo, "core_id")) as core,
                ):
                    cores.add((pkg.read().strip(), core.read().strip()))
    except OSError:
        cores.clear()
    return len(cores) or os.cpu_count() or 1


def parse_size(text: str) -> int:
    """A size in bytes from ``6442450944``, ``6G``, ``512M``, ``1.5GiB`` or ``64k`` (powers of 1024); ValueError
    (argparse's one-line error) for anything else, ``inf`` and an empty value among them."""
    match = _SIZE.fullmatch(text.strip().upper())
    size = float(match[1]) * _SIZE_UNITS[match[2]] if match else 0.0
    if not 0 < size < 2**63:
        raise ValueError(f"not a positive size: {text!r}")
    return int(size)


def parse_count(text: str) -> int:
    """A whole number, 0 or more (a count of models, seconds); ValueError (argparse's one-line error) otherwise."""
    count = int(text)
    if count < 0:
        raise ValueError(f"negative: {text!r}")
    return count


def is_off_flag(option: str) -> bool:
    """Whether a spelling of an on/off switch turns it off: as llama-server's help lists it (``-nr``, ``-nkvo``,
    ``--no-jinja``; not ``--no-host``), else lfmserve's own ``--no-x``."""
    known = option_of(option)
    return option in known.negative if known else option.lstrip("-").startswith("no")


class OnOffAction(argparse.Action):
    """A switch with several spellings: an off spelling (:func:`is_off_flag`) turns it off, any other on."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(namespace, self.dest, not is_off_flag(option or ""))


class ShortcutAction(argparse.Action):
    """A switch that also sets other fields (``sets``: field name -> value) where it stands on the command line, as
    llama-server's shortcuts do (``--spec-default``): its options apply in command-line order, so a flag for one
    of those fields wins when given after the shortcut and is overridden when given before it. A variable sets
    only the switch."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, sets: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)
        self.sets = dict(sets)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(namespace, self.dest, True)
        for name, value in self.sets.items():
            setattr(namespace, name, value)
