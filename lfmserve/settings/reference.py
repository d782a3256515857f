"""``docs/cli.md``, written from the settings' field metadata and llama-server's option table: every flag of
``--help``, section by section, then every option of llama-server's with what lfmserve does with it.

The document is generated, never edited by hand, so it cannot drift from the parser: a test compares it with
:func:`cli_markdown` and with the flags ``--help`` lists. Regenerate it with
``python -m lfmserve.settings.reference > docs/cli.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import Counter
from typing import Any

from .argv import all_fields, environment_names
from .fields import flag_spec
from .groups import GROUPS
from .llama_server import OPTIONS, Disposition, Option

_INTRO = """# Command-line flags

`lfmserve [options]` takes llama-server's flags, with the same spellings and meanings: each is matched whole, as
llama-server matches it (no abbreviations, no value joined to a short flag: `-sm none` is the split mode, never
`-s m`; `--ctx-size=4096` is also taken). [llama-server's options](#llama-servers-options) says what lfmserve does
with every option of the pinned llama-server's `--help`. A bad, unknown or refused flag or variable stops the
start with one line and exit code 1, llama-server's.

Each flag can also be set through the environment variables in its row, the first set winning: lfmserve's own
`LFMSERVE_<FIELD>` (`LFMSERVE_PORT=9000`), then llama-server's: `LLAMA_ARG_NO_X`, which turns a switch off when
set at all (as in llama.cpp), then `LLAMA_ARG_X` (switches take 1/0, true/false, on/off, enabled/disabled), and
`LLAMA_API_KEY`, `HF_TOKEN`. So when both `LFMSERVE_X` and `LLAMA_ARG_X` are set, `LFMSERVE_X` wins. A flag on
the command line replaces the variables, for repeatable flags too, as in llama-server. `LLAMA_CACHE` names the
folder `-hf` downloads go to, as in llama.cpp. A router preset's keys are the same names: a flag without its
dashes, long or short (`ctx-size`, `c`, `no-jinja`), or a variable (`LLAMA_ARG_CTX_SIZE`, `LFMSERVE_CTX_SIZE`).
`lfmserve --help` prints the same list. This page is generated from the settings' metadata and the option table
(`python -m lfmserve.settings.reference > docs/cli.md`); a test fails when the two disagree.
"""

_DISPOSITIONS = {
    Disposition.APPLIED: "Taken with llama-server's meaning.",
    Disposition.DIFFERENT: "Taken, with a difference said in the row.",
    Disposition.IGNORED: "Accepted with their values, then named in one warning line at start (a variable too, "
    "when its flag is not given).",
    Disposition.LATER: "Refused, naming what is not there yet: a later change brings it. Their variables are "
    "refused the same way.",
    Disposition.REFUSED: "Refused for good, saying why. Their variables are refused the same way.",
}


def cli_markdown() -> str:
    """The whole page: one section per settings group, then llama-server's options by disposition."""
    parts = [_INTRO]
    for kind in GROUPS.values():
        parts.append(f"\n## {kind.TITLE}\n\n{(kind.__doc__ or '').strip()}\n")
        parts.append("\n| flags | default | what it sets | environment |\n|---|---|---|---|\n")
        parts.extend(_row(f) for f in dataclasses.fields(kind) if f.init)
    parts.append(_llama_server_options())
    return "".join(parts)


def _llama_server_options() -> str:
    spellings = Counter(option.disposition for option in OPTIONS for _ in option.spellings)
    variables = [option.env for option in OPTIONS if option.env and option.env.startswith("LLAMA_ARG_")]
    read = {name for _, f in all_fields() for name in environment_names(f)}
    figures = ", ".join(f"{spellings[d]} {d.value}" for d in Disposition)
    parts = [
        "\n## llama-server's options\n\n"
        f"Every option of the pinned llama-server's `--help` ({len(OPTIONS)} options, "
        f"{sum(spellings.values())} spellings: {figures}), and what lfmserve does with it. "
        f"{sum(name in read for name in variables)} of its {len(variables)} `LLAMA_ARG_*` variables set a flag's "
        "value; the others are ignored or refused as their flags are.\n"
    ]
    for disposition, intro in _DISPOSITIONS.items():
        parts.append(f"\n### {disposition.value}\n\n{intro}\n\n| spellings | environment | why |\n|---|---|---|\n")
        parts.extend(_option_row(option) for option in OPTIONS if option.disposition is disposition)
    return "".join(parts)


def _option_row(option: Option) -> str:
    return f"| {_code(option.spellings)} | {_code(option.variables)} | {_cell(option.why)} |\n"


def _row(f: dataclasses.Field[Any]) -> str:
    flags = list(flag_spec(f).flags)
    if flag_spec(f).argparse.get("action") is argparse.BooleanOptionalAction:  # argparse adds the --no- spelling
        flags += [name.replace("--", "--no-", 1) for name in flags if name.startswith("--")]
    flags += [name for also in flag_spec(f).also for name in also.flags]
    return f"| {_code(flags)} | {_default(f)} | {_cell(flag_spec(f).help)} | {_code(environment_names(f))} |\n"


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
