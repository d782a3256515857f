"""The command line of :class:`~lfmserve.settings.Settings`, both ways: llama-server style arguments (and
``LFMSERVE_<FIELD>`` environment variables) into groups, and groups back into the flags that reproduce them.

The parser is built from the groups' field metadata, one ``--help`` section per group, then the flags of
llama-server's that lfmserve refuses, each with its reason. Environment variables are read here and nowhere else,
from the mapping the caller passes (a router's children are given none: their settings travel as flags).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn

from .fields import OnOffAction, is_off_flag
from .groups import GROUPS

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
_BOOLEAN_ACTIONS = ("store_true", argparse.BooleanOptionalAction, OnOffAction)
REFUSED_TITLE = "refused flags"

#: llama-server flags lfmserve does not take, and why: each fails at startup with its message (llama-server's
#: own message for the ones it removed).
REFUSED_FLAGS: dict[tuple[str, ...], str] = {
    ("--draft", "--draft-n", "--draft-max"): "the argument has been removed. use --spec-draft-n-max or "
    "--spec-ngram-mod-n-max",
    ("--draft-min", "--draft-n-min"): "the argument has been removed. use --spec-draft-n-min or --spec-ngram-mod-n-min",
    ("--spec-ngram-size-n",): "the argument has been removed. use the respective --spec-ngram-*-size-n",
    ("--spec-ngram-size-m",): "the argument has been removed. use the respective --spec-ngram-*-size-m",
    ("--spec-ngram-min-hits",): "the argument has been removed. use the respective --spec-ngram-*-min-hits",
    ("-mu", "--model-url", "-mmu", "--mmproj-url"): "downloads by URL are not supported by lfmserve: use -hf or -m",
    ("--tools", "--tools-runtime", "--mcp-servers-config", "--mcp-servers-json", "--ui-mcp-proxy", "--agent"): (
        "built-in tools and MCP servers are not supported by lfmserve"
    ),
}


def all_fields() -> Iterator[tuple[str, dataclasses.Field[Any]]]:
    """Every settings field with the name of its group, in ``--help`` order."""
    for group, kind in GROUPS.items():
        for f in dataclasses.fields(kind):
            yield group, f


def parser() -> argparse.ArgumentParser:
    """lfmserve's argument parser: one section per group, then the refused flags. A flag not given is left out of
    the parsed values (the environment fills it in :func:`parse_groups`)."""
    built = _OneLineErrorParser(
        prog="lfmserve",
        usage="lfmserve [options]",
        allow_abbrev=False,
        description="Serve LFM (and other GGUF) models with llama-server's HTTP API.",
    )
    sections = {group: built.add_argument_group(kind.TITLE) for group, kind in GROUPS.items()}
    for group, f in all_fields():
        meta = f.metadata
        kwargs = {"default": argparse.SUPPRESS, **meta["argparse"]}
        sections[group].add_argument(*meta["flags"], dest=f.name, help=meta["help"], **kwargs)
    refused = built.add_argument_group(REFUSED_TITLE)
    for flags, message in REFUSED_FLAGS.items():
        refused.add_argument(*flags, action=_RefusedFlag, nargs="?", default=argparse.SUPPRESS, help=message)
    return built


def parse_groups(argv: Sequence[str], environ: Mapping[str, str]) -> dict[str, Any]:
    """Each group built from ``argv`` (llama-server style) and ``environ``: a variable gives a field's value only
    when the command line does not (for repeatable flags too: ``--api-key k2`` replaces ``LFMSERVE_API_KEY=k1``).
    A bad flag or variable exits 2 with one line."""
    built = parser()
    values = vars(built.parse_args(_scaled_pairs(_dashed(argv))))
    for name, value in _environment_values(built, environ).items():
        values.setdefault(name, value)
    for _, f in all_fields():
        if f.metadata["argparse"].get("action") == "append" and f.name in values:
            values[f.name] = tuple(values[f.name])  # argparse collects a list; the settings keep a tuple
    return {
        group: kind(**{f.name: values[f.name] for f in dataclasses.fields(kind) if f.name in values})
        for group, kind in GROUPS.items()
    }


def to_argv(groups: Mapping[str, Any]) -> list[str]:
    """The flags that reproduce ``groups`` from the defaults: every field that differs from its default, by its
    longest spelling (``--ctx-size 4096``, ``--no-jinja``, ``--api-key k`` once per key), a value in its own
    argument as llama-server's router writes a child's (``--flag=value`` when the value starts with a dash)."""
    argv: list[str] = []
    for group, f in all_fields():
        value = getattr(groups[group], f.name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if value != default:
            argv += _flags_of(f, value)
    return argv


def preset_argv(entries: Mapping[str, str]) -> list[str]:
    """The flags one section of a llama-server preset (INI) stands for. Its keys are long flags without their
    dashes (``ctx-size``), short ones (``c``), or variable names (``LLAMA_ARG_CTX_SIZE``, ``LFMSERVE_CTX_SIZE``);
    a switch's value is true/false (on/off, 1/0), and its off spelling (``no-jinja = true``) turns it off.
    Raises KeyError naming an unknown key, ValueError for a switch that is neither."""
    keys = _preset_keys()
    argv: list[str] = []
    for key, raw in entries.items():
        if key not in keys:
            raise KeyError(key)
        f, spelling = keys[key]
        action = f.metadata["argparse"].get("action")
        if action in _BOOLEAN_ACTIONS:
            value = switch_value(raw)
            if value is None:
                raise ValueError(f"{key} = {raw!r}: not true or false")
            argv += _flags_of(f, value != is_off_flag(spelling))
        else:
            argv += _flags_of(f, (raw,) if action == "append" else raw)
    return argv


def switch_value(raw: str) -> bool | None:
    """A preset's on/off value (true/false, on/off, yes/no, 1/0, enabled/disabled); None for anything else."""
    value = raw.strip().lower()
    if value in _TRUE + ("enabled",):
        return True
    return False if value in _FALSE + ("disabled",) else None


def _preset_keys() -> dict[str, tuple[dataclasses.Field[Any], str]]:
    keys: dict[str, tuple[dataclasses.Field[Any], str]] = {}
    for _, f in all_fields():
        for variable in (f"LLAMA_ARG_{f.name.upper()}", *environment_names(f)):
            keys[variable] = (f, "")
        keys.update({spelling.lstrip("-"): (f, spelling) for spelling in f.metadata["flags"]})
    return keys


def _flags_of(f: dataclasses.Field[Any], value: Any) -> list[str]:
    flags: tuple[str, ...] = f.metadata["flags"]
    action = f.metadata["argparse"].get("action")
    if action in (argparse.BooleanOptionalAction, OnOffAction):
        on = [name for name in flags if not is_off_flag(name)]
        off = [name for name in flags if is_off_flag(name)]
        if action is argparse.BooleanOptionalAction:
            off = [name.replace("--", "--no-", 1) for name in on]
        return [max(on if value else off, key=len)]
    if action == "store_true":
        return [max(flags, key=len)] if value else []
    name = max(flags, key=len)
    values = value if action == "append" else (value,)
    return [token for one in values for token in _valued(name, str(one))]


def _valued(name: str, value: str) -> list[str]:
    return [f"{name}={value}"] if value.startswith("-") else [name, value]


class _RefusedFlag(argparse.Action):
    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        parser.error(f"{option}: {self.help}")


class _OneLineErrorParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _dashed(argv: Sequence[str]) -> list[str]:
    """llama-server reads ``--long_flag`` as ``--long-flag``: the same here (values are left alone)."""
    out = []
    for arg in argv:
        if arg.startswith("--") and "_" in arg:
            name, eq, value = arg.partition("=")
            arg = name.replace("_", "-") + eq + value
        out.append(arg)
    return out


def _scaled_pairs(argv: list[str]) -> list[str]:
    """``--lora-scaled FILE SCALE`` (llama-server's older spelling) as ``--lora-scaled FILE:SCALE``."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--lora-scaled" and i + 2 < len(argv) and _is_number(argv[i + 2]) and ":" not in argv[i + 1]:
            out += [arg, f"{argv[i + 1]}:{argv[i + 2]}"]
            i += 3
            continue
        out.append(arg)
        i += 1
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def environment_names(f: dataclasses.Field[Any]) -> tuple[str, ...]:
    """The variables that set a field, the first found winning: ``LFMSERVE_<FIELD>``, then llama-server's names."""
    return (f"LFMSERVE_{f.name.upper()}", *f.metadata["environment"])


def secret_variables() -> tuple[str, ...]:
    """Every variable that carries a secret (API keys, their files, the Hugging Face token)."""
    return tuple(name for _, f in all_fields() if f.metadata["secret"] for name in environment_names(f))


def _environment_values(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> dict[str, Any]:
    """The fields ``environ`` sets, converted to their types; a value that does not convert is an error."""
    out: dict[str, Any] = {}
    for _, f in all_fields():
        for variable in environment_names(f):
            raw = environ.get(variable)
            if raw is not None:
                out[f.name] = _environment_value(parser, f, variable, raw)
                break
    return out


def _environment_value(parser: argparse.ArgumentParser, f: dataclasses.Field[Any], variable: str, raw: str) -> Any:
    kind = f.metadata["argparse"].get("type")
    action = f.metadata["argparse"].get("action")
    if action in _BOOLEAN_ACTIONS:
        value = raw.strip().lower()
        if value not in _TRUE + _FALSE:
            parser.error(f"environment variable {variable} has value {raw!r}: not a valid bool")
        return value in _TRUE
    if action == "append":
        return [raw]
    if kind is None:
        return raw
    try:
        return kind(raw)
    except ValueError:
        parser.error(f"environment variable {variable} has value {raw!r}: not a valid {kind.__name__}")
