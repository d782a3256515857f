"""``docs/cli.md``, written from the settings' field metadata: every flag of ``--help``, section by section.

The document is generated, never edited by hand, so it cannot drift from the parser: a test compares it with
:func:`cli_markdown` and with the flags ``--help`` lists. Regenerate it with
``python -m lfmserve.settings.reference > docs/cli.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from .argv import REFUSED_FLAGS, REFUSED_TITLE, environment_names
from .groups import GROUPS

_INTRO = """# Command-line flags

`lfmserve [options]` takes llama-server's flags, with the same spellings and meanings. Each flag can also be
set through the environment variable in its row (`LFMSERVE_PORT=9000`; where a row names two, the first set
wins); a flag on the command line replaces the variable's value, for repeatable flags too.
`lfmserve --help` prints the same list. This page is generated from the settings' metadata
(`python -m lfmserve.settings.reference > docs/cli.md`); a test fails when the two disagree.
"""


def cli_markdown() -> str:
    """The whole page: one section per settings group, then the flags lfmserve refuses and why."""
    parts = [_INTRO]
    for kind in GROUPS.values():
        parts.append(f"\n## {kind.TITLE}\n\n{(kind.__doc__ or '').strip()}\n")
        parts.append("\n| flags | default | what it sets | environment |\n|---|---|---|---|\n")
        parts.extend(_row(f) for f in dataclasses.fields(kind))
    parts.append(f"\n## {REFUSED_TITLE}\n\nllama-server's flags that lfmserve does not take, and why.\n")
    parts.append("\n| flags | why |\n|---|---|\n")
    parts.extend(f"| {_code(flags)} | {_cell(why)} |\n" for flags, why in REFUSED_FLAGS.items())
    return "".join(parts)


def _row(f: dataclasses.Field[Any]) -> str:
    flags = list(f.metadata["flags"])
    if f.metadata["argparse"].get("action") is argparse.BooleanOptionalAction:  # argparse adds the --no- spelling
        flags += [name.replace("--", "--no-", 1) for name in flags if name.startswith("--")]
    return f"| {_code(flags)} | {_default(f)} | {_cell(f.metadata['help'])} | {_code(environment_names(f))} |\n"


def _default(f: dataclasses.Field[Any]) -> str:
    value = f.default
    if value is None or value == () or value is dataclasses.MISSING:  # decided at start-up: the help says how
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"`{value}`"


def _code(flags: Any) -> str:
    return ", ".join(f"`{name}`" for name in flags)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    print(cli_markdown(), end="")
