"""How a settings field carries its command line: its flags, help and argparse options live in its metadata.

Every group in :mod:`.groups` declares its fields with :func:`flag` and :func:`switch`, so a flag's spellings,
default and help are written once, next to the field, and the parser, ``--help``, ``docs/cli.md`` and
:func:`~lfmserve.settings.argv.to_argv` all read them from there.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import field
from typing import Any

DEFAULT_HF_REPO = "LiquidAI/LFM2.5-1.2B-Instruct-GGUF:Q4_K_M"
#: The KV cache types llama-server takes for ``-ctk`` / ``-ctv``.
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
#: llama-server's short "off" spellings that do not start with ``no``.
_SHORT_OFF_FLAGS = frozenset({"-nr"})


def flag(
    *names: str,
    help: str,
    sampling: bool = False,
    environment: tuple[str, ...] = (),
    secret: bool = False,
    **argparse_kwargs: Any,
) -> dict[str, Any]:
    """Field metadata: its flags and help; ``sampling`` marks a default for the request field of the same name;
    ``environment`` names variables read after ``LFMSERVE_<FIELD>`` (llama-server's, such as ``LLAMA_API_KEY``);
    ``secret`` marks a value that no listing, log line or child's command line may show."""
    return {
        "flags": names,
        "help": help,
        "sampling": sampling,
        "environment": environment,
        "secret": secret,
        "argparse": argparse_kwargs,
    }


def switch(*names: str, help: str, default: bool | None, action: Any = argparse.BooleanOptionalAction) -> Any:
    """A boolean field and its flags (``--x`` / ``--no-x`` unless ``action`` says otherwise); a None default is
    decided where the field is used."""
    return field(default=default, metadata=flag(*names, help=help, action=action))


def physical_cores() -> int:
    """Physical cores (llama-server's default thread count), counted from sysfs; logical as fallback."""
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
    """A size in bytes from ``6442450944``, ``6G``, ``512M`` or ``64k`` (powers of 1024); ValueError otherwise."""
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    number, unit = (value[:-1], value[-1]) if value[-1:] in units else (value, "")
    size = float(number) * units[unit]
    if size <= 0:
        raise ValueError(f"not a positive size: {text!r}")
    return int(size)


def is_off_flag(option: str) -> bool:
    """Whether a spelling of an on/off switch turns it off (``--no-x``, llama-server's ``-no-kvu``, ``-nocb``,
    ``-nr``)."""
    return option.lstrip("-").startswith("no") or option in _SHORT_OFF_FLAGS


class OnOffAction(argparse.Action):
    """A switch with several spellings: an off spelling (:func:`is_off_flag`) turns it off, any other on."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(namespace, self.dest, not is_off_flag(option or ""))
