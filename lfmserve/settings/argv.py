"""The command line of :class:`~lfmserve.settings.Settings`, both ways: llama-server style arguments (and
environment variables) into groups, and groups back into the flags that reproduce them.

The parser is built from the groups' field metadata, one ``--help`` section per group, then llama-server's
options that no field takes (:mod:`.llama_server`): those ignored on this build, then those refused, each with its
reason. It is as strict as llama-server: an option is spelled in full (no abbreviations) and never joined to its
value (``-sm none`` is the split mode, never ``-s m``), and every error exits 1, llama-server's code. Environment
variables are read here and nowhere else, from the mapping the caller passes (a router's children are given
none: their settings travel as flags): ``LFMSERVE_<FIELD>`` first, then llama-server's ``LLAMA_ARG_NO_X`` and
``LLAMA_ARG_X``; under them the flags llama.cpp's config files stand for (:mod:`.config_files`), and under them all
Ollama's server variables (:mod:`.ollama_env`).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

from .fields import OnOffAction, ShortcutAction, flag_spec, is_off_flag
from .groups import GROUPS
from .llama_server import HELP, NEGATIVE_VARIABLES, OPTIONS, Disposition, Option, option_of, taken
from .ollama_env import apply_ollama

_TRUE = ("1", "true", "yes", "on", "enabled")
_FALSE = ("0", "false", "no", "off", "disabled", "")
_BOOLEAN_ACTIONS = ("store_true", argparse.BooleanOptionalAction, OnOffAction, ShortcutAction)
IGNORED_TITLE = "ignored on this build"
REFUSED_TITLE = "refused flags"
#: Where the parser collects the ignored options given, and the name of the Settings field that lists them.
IGNORED = "ignored"
#: The name of the Settings field that lists Ollama's variables set, each with what it became.
OLLAMA = "ollama"
#: The name of the Settings field that lists the fields llama.cpp's config files gave.
CONFIGURED = "configured"


def all_fields() -> Iterator[tuple[str, dataclasses.Field[Any]]]:
    """Every settings field with the name of its group, in ``--help`` order."""
    for group, kind in GROUPS.items():
        for f in dataclasses.fields(kind):
            if f.init:  # not what a group reads from its fields when made (ServerSettings' key file)
                yield group, f


@functools.cache
def parser() -> StrictParser:
    """lfmserve's argument parser: one section per group, then llama-server's options ignored on this build, then
    those refused. A flag not given is left out of the parsed values (the environment fills it in
    :func:`parse_groups`). It is built once and shared by every parse (a router's presets, each child's argv),
    because building it costs more than a parse and parsing leaves it unchanged: the actions write only to the
    namespace."""
    built = StrictParser(
        prog="lfmserve",
        usage="lfmserve [options]",
        add_help=False,
        description="Serve LFM (and other GGUF) models with llama-server's HTTP API.",
    )
    built.keep(built.add_argument(*HELP.spellings, action="help", help="show this help and exit"))
    sections = {group: built.add_argument_group(kind.TITLE) for group, kind in GROUPS.items()}
    for group, f in all_fields():
        for spec in (flag_spec(f), *flag_spec(f).also):  # the field's flags, then its other spellings
            kwargs = {"default": argparse.SUPPRESS, **spec.argparse}
            built.keep(sections[group].add_argument(*spec.flags, dest=f.name, help=spec.help, **kwargs))
    ignored = built.add_argument_group(IGNORED_TITLE)
    refused = built.add_argument_group(REFUSED_TITLE)
    for option in OPTIONS:
        if option.disposition is Disposition.IGNORED:
            built.keep(
                ignored.add_argument(
                    *option.spellings,
                    action=_IgnoredFlag,
                    dest=IGNORED,
                    default=argparse.SUPPRESS,
                    metavar="VALUE",
                    help=option.why,
                    nargs=None if option.values == 1 else option.values,  # None: one value, as llama-server's takes
                )
            )
        elif not taken(option):
            built.keep(
                refused.add_argument(
                    *option.spellings,
                    action=_RefusedFlag,
                    nargs=0 if option.values == 0 else "?",  # a value or none: the refusal names the option anyway
                    default=argparse.SUPPRESS,
                    help=option.why,
                )
            )
    return built


def parse_groups(argv: Sequence[str], environ: Mapping[str, str], config_argv: Sequence[str] = ()) -> dict[str, Any]:
    """Each group built from ``argv`` (llama-server style), ``environ`` and ``config_argv`` (the flags llama.cpp's
    config files stand for, :mod:`.config_files`), under ``ignored`` the ignored options given (their flags, or
    their variables when the flag is not given), under ``ollama`` Ollama's variables set, and under ``configured``
    the fields the config files gave. A variable gives a field's value only when the command line does not (for
    repeatable flags too: ``--api-key k2`` replaces ``LFMSERVE_API_KEY=k1``), the config files only when neither
    does (as in llama.cpp, which applies them first), and Ollama's variables only when none of these does. A bad or
    refused flag or variable exits 1 with one line."""
    built = parser()
    values = vars(built.parse_args(_scaled_pairs(_dashed(argv))))
    ignored = values.pop(IGNORED, [])
    for name, value in _environment_values(built, environ).items():
        values.setdefault(name, value)
    configured = vars(built.parse_args(config_argv))
    given = {option_of(name) for name in ignored}
    ignored += [name for name in configured.pop(IGNORED, []) if option_of(name) not in given]
    configured = {name: value for name, value in configured.items() if name not in values}
    values |= configured
    try:  # Ollama's variables last: they set what the command line, the other variables and the files leave
        ollama = apply_ollama(environ, values)
    except ValueError as exc:
        built.error(str(exc))
    for _, f in all_fields():
        options = flag_spec(f).argparse
        if (options.get("action") == "append" or isinstance(options.get("nargs"), int)) and f.name in values:
            values[f.name] = tuple(values[f.name])  # argparse collects a list; the settings keep a tuple
    try:  # a group that checks its fields together (one grammar) raises ValueError
        groups: dict[str, Any] = {
            group: kind(**{f.name: values[f.name] for f in dataclasses.fields(kind) if f.name in values})
            for group, kind in GROUPS.items()
        }
    except ValueError as exc:
        built.error(str(exc))
    variables = _untaken_variables(built, environ, given)
    return {
        **groups,
        IGNORED: tuple(dict.fromkeys([*ignored, *variables])),
        OLLAMA: ollama,
        CONFIGURED: tuple(configured),
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
    """The flags one section of a llama-server preset (INI) stands for. Its keys are llama-server's: a long or
    short flag without its dashes (``ctx-size``, ``c``, ``no-jinja``) or a variable (``LLAMA_ARG_CTX_SIZE``,
    ``LLAMA_ARG_NO_JINJA``), or lfmserve's ``LFMSERVE_CTX_SIZE``. A switch's value is true/false (on/off, 1/0),
    and an off key (``no-jinja = true``, ``LLAMA_ARG_NO_JINJA = true``) turns it off. The key of an option no field
    takes gives its flag, which the model's command line then ignores or refuses by name.
    Raises KeyError naming an unknown key, ValueError for a switch that is neither."""
    built = parser()
    keys = _preset_keys(built)
    fields = {f.name: f for _, f in all_fields()}
    argv: list[str] = []
    for key, raw in entries.items():
        if key not in keys:
            raise KeyError(key)
        spelling, flip = keys[key]
        action = built.options[spelling]
        f = fields.get(action.dest)
        if action.nargs == 0:
            value = switch_value(raw)
            if value is None:
                raise ValueError(f"{key} = {raw!r}: not true or false")
            on = value != (is_off_flag(spelling) != flip)
            argv += _flags_of(f, on) if f else _switch_flags(action.option_strings, on)
        elif isinstance(action.nargs, int):  # several values (START END), blank-separated as a variable's
            argv += [_longest(action.option_strings, off=False), *raw.split()]
        else:  # the key's own flag: --sampling-seq's value is not in --samplers' form
            argv += _valued(_longest(action.option_strings, off=False), raw)
    return argv


def unknown_preset_keys(keys: Iterable[str]) -> list[str]:
    """Those of ``keys`` that :func:`preset_argv` does not know (no option's flag or variable), in their order."""
    known = _preset_keys(parser())
    return [key for key in keys if key not in known]


def switch_value(raw: str) -> bool | None:
    """A switch's value in a preset or a variable (true/false, on/off, yes/no, 1/0, enabled/disabled; empty is
    false); None for anything else."""
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    return False if value in _FALSE else None


def _preset_keys(built: StrictParser) -> dict[str, tuple[str, bool]]:
    """Each preset key -> the spelling it stands for, and whether it turns a switch's value around (the
    ``LLAMA_ARG_NO_*`` variables)."""
    fields = {f.name: f for _, f in all_fields()}
    keys: dict[str, tuple[str, bool]] = {}
    for action in dict.fromkeys(built.options.values()):
        if action.dest == "help":
            continue
        keys.update({spelling.lstrip("-"): (spelling, False) for spelling in action.option_strings})
        f = fields.get(action.dest)
        if f is not None and action.option_strings[0] not in flag_spec(f).flags:
            f = None  # one of the field's other spellings: its variables go with the field's own flags
        option = option_of(action.option_strings[0])
        variables = environment_names(f) if f else option.variables if option else ()
        on = _longest(action.option_strings, off=False)
        keys.update({variable: (on, variable in NEGATIVE_VARIABLES) for variable in variables})
    return keys


def _longest(spellings: Sequence[str], *, off: bool) -> str:
    return max((name for name in spellings if is_off_flag(name) == off), key=len, default="")


def _switch_flags(spellings: Sequence[str], on: bool) -> list[str]:
    """A switch no field takes, on or off: its longest spelling for that (none when it has no off spelling)."""
    name = _longest(spellings, off=not on)
    return [name] if name else []


def _flags_of(f: dataclasses.Field[Any], value: Any) -> list[str]:
    flags: tuple[str, ...] = flag_spec(f).flags
    action = flag_spec(f).argparse.get("action")
    if action in (argparse.BooleanOptionalAction, OnOffAction):
        on = [name for name in flags if not is_off_flag(name)]
        off = [name for name in flags if is_off_flag(name)]
        if action is argparse.BooleanOptionalAction:
            off = [name.replace("--", "--no-", 1) for name in on]
        return [max(on if value else off, key=len)]
    if action in ("store_true", ShortcutAction):  # a shortcut's fields come after it, each written when set
        return [max(flags, key=len)] if value else []
    name = max(flags, key=len)
    if isinstance(flag_spec(f).argparse.get("nargs"), int):  # one flag, then its values (START END)
        return [name, *map(str, value)]
    write = flag_spec(f).write
    values = write(value) if write else value if action == "append" else (value,)
    return [token for one in values for token in _valued(name, str(one))]


def _valued(name: str, value: str) -> list[str]:
    return [f"{name}={value}"] if value.startswith("-") else [name, value]


class _RefusedFlag(argparse.Action):
    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        parser.error(f"{option}: {self.help}")


class _IgnoredFlag(argparse.Action):
    """Takes the option's values, as llama-server does, and notes the spelling given for the start-up warning."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(namespace, self.dest, [*getattr(namespace, self.dest, []), option])


class StrictParser(argparse.ArgumentParser):
    """argparse as strict as llama-server, which matches each argument whole: no abbreviations (``--ctx`` is not
    ``--ctx-size``) and no value joined to a short option (``-sm`` is not ``-s m``, ``-c4096`` is unknown); any
    error is one line and exit code 1.

    The one place that touches argparse's private names: ``_get_option_tuples``, the matcher of partial and joined
    spellings, answers nothing (``test_nothing_is_misread`` in tests/settings/test_llama_server.py pins what it
    does). The options added are kept here, by spelling (:attr:`options`), as argparse keeps them only privately.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: Every option's action by each of its spellings (:meth:`keep`).
        self.options: dict[str, argparse.Action] = {}

    def keep(self, action: argparse.Action) -> None:
        """Keep an added option's action under its spellings."""
        self.options.update(dict.fromkeys(action.option_strings, action))

    def _get_option_tuples(self, option_string: str) -> list[Any]:
        return []

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"{self.prog}: error: {message} (see --help)\n")


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
    """The variables that set a field, the first set winning: ``LFMSERVE_<FIELD>``, then llama-server's for the
    option whose spellings the field takes (``LLAMA_ARG_NO_X`` before ``LLAMA_ARG_X``), then any others the field
    names (``HUGGING_FACE_HUB_TOKEN``)."""
    options = [option for name in flag_spec(f).flags if (option := option_of(name)) is not None]
    names = [f"LFMSERVE_{f.name.upper()}", *(v for option in options for v in option.variables)]
    return tuple(dict.fromkeys([*names, *flag_spec(f).environment]))


def secret_variables() -> tuple[str, ...]:
    """Every variable that carries a secret (API keys, their files, the Hugging Face token)."""
    return tuple(name for _, f in all_fields() if flag_spec(f).secret for name in environment_names(f))


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
    kind: Any = flag_spec(f).argparse.get("type")
    action = flag_spec(f).argparse.get("action")
    choices = flag_spec(f).argparse.get("choices")
    if variable in NEGATIVE_VARIABLES:  # llama.cpp: set at all, whatever its value, it turns the switch off
        return False
    if action in _BOOLEAN_ACTIONS:
        on = switch_value(raw)
        if on is None:
            parser.error(f"environment variable {variable} has value {raw!r}: not a valid bool")
        return on
    count = flag_spec(f).argparse.get("nargs")
    if isinstance(count, int):  # several values (START END): blank-separated
        parts = raw.split()
        if len(parts) != count:
            parser.error(f"environment variable {variable} has value {raw!r}: not {count} values")
        try:
            return [part if kind is None else kind(part) for part in parts]
        except ValueError:
            parser.error(f"environment variable {variable} has value {raw!r}: not {count} valid {kind.__name__}s")
    try:
        value = raw if kind is None else kind(raw)
    except argparse.ArgumentTypeError as exc:  # its message names the value
        parser.error(f"environment variable {variable}: {exc}")
    except ValueError:
        parser.error(f"environment variable {variable} has value {raw!r}: not a valid {kind.__name__}")
    if choices is not None and value not in choices:
        parser.error(f"environment variable {variable} has value {raw!r}: not one of {', '.join(map(str, choices))}")
    return [value] if action == "append" else value


def _untaken_variables(
    parser: argparse.ArgumentParser, environ: Mapping[str, str], given: Iterable[Option | None]
) -> list[str]:
    """The variables set for options no field takes: an ignored one's name (unless its flag was given: the
    command line replaces the environment), a refused one an error naming it."""
    names = []
    for option in OPTIONS:
        variable = next((name for name in option.variables if name in environ), None)
        if variable is None or taken(option):
            continue
        if option.disposition is not Disposition.IGNORED:
            parser.error(f"environment variable {variable}: {option.why}")
        if option not in given:
            names.append(variable)
    return names
