"""Every option of llama-server's ``--help`` against lfmserve's table and parser: each spelling has a disposition,
is one of lfmserve's option strings, and means what it means in llama-server; each variable means what its flag
does.

The fixture ``llama_server_help.txt`` is the pinned llama-server's own help, unedited but for trailing spaces:
``llama-server --help | sed 's/[ \\t]*$//'``, the binary built from llama-cpp-python 0.3.36's vendored llama.cpp
(``version: 0.5.0-dev (build 1, commit 0c1e570)``, CPU build).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from lfmserve.settings import DeviceSettings, Settings
from lfmserve.settings.argv import parser, preset_argv
from lfmserve.settings.groups import GROUPS
from lfmserve.settings.llama_server import OPTIONS, Disposition, Option, ignored_line, taken

HELP = Path(__file__).with_name("llama_server_help.txt")
#: A JSON schema file, for the flags that read one (``-jf``) or any text (``--grammar-file``).
SCHEMA = Path(__file__).with_name("schema.json")
ACTIONS = parser().options
TAKEN = [option for option in OPTIONS if taken(option) and option.spellings[0] != "-h"]


@dataclasses.dataclass(frozen=True)
class HelpOption:
    spellings: tuple[str, ...]
    takes_value: bool
    env: str | None


def _help_options() -> list[HelpOption]:
    """The first column of every option line (spellings, then value placeholders) and its ``(env: X)``."""
    found: list[HelpOption] = []
    for line in HELP.read_text(encoding="utf-8").splitlines():
        if line.startswith("-") and not line.startswith("-----"):
            column = re.split(r"(?<=[^,\s])\s{2,}", line, maxsplit=1)[0]
            names = re.match(r"-[^\s,]+(?:,\s+-[^\s,]+)*", column)
            assert names is not None
            found.append(HelpOption(tuple(re.split(r",\s+", names[0])), bool(column[names.end() :].strip()), None))
        env = re.search(r"\(env: ([A-Z0-9_]+)\)", line)
        if env:
            found[-1] = dataclasses.replace(found[-1], env=env[1])
    return found


#: Values read when the settings are made: a file that exists (any text is keys), a JSON object.
_READ_AT_PARSE = {
    "api_key_file": str(SCHEMA),
    "ui_config_file": str(SCHEMA),
    "ui_config": "{}",
    "tools": "all",
    "tools_runtime": "ssh:host",
    "mcp_servers_config": str(Path(__file__).with_name("mcp_servers.json")),
    "mcp_servers_json": '{"mcpServers": {}}',
}


def _sample(action: argparse.Action) -> str:
    """A value the flag takes: its last choice, else the first of a few that its type converts."""
    if action.dest in _READ_AT_PARSE:
        return _READ_AT_PARSE[action.dest]
    if action.choices:
        return str(list(action.choices)[-1])
    for text in ("7", "0.5", "on", "0-1", "{}", "a.gguf:0.5", "kt", "top_k;temp", "15043+1", str(SCHEMA)):
        try:
            (action.type or str)(text)  # type: ignore[operator]
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            continue
        return text
    raise AssertionError(action.option_strings)


def _parse(argv: list[str], environ: dict[str, str] | None = None) -> Settings:
    return Settings.from_argv(argv, environ=environ or {})


def _refusal(argv: list[str], environ: dict[str, str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        _parse(argv, environ)
    assert exit_info.value.code == 1
    return capsys.readouterr().err


def test_every_spelling_of_the_help_has_one_disposition_with_its_arity_and_variable() -> None:
    listed = _help_options()
    assert {o.spellings: (o.takes_value, o.env) for o in listed} == {
        o.spellings: (o.values > 0, o.env) for o in OPTIONS
    }
    spellings = [name for option in listed for name in option.spellings]
    assert (len(listed), len(spellings), len(set(spellings))) == (255, 412, 412)
    assert len([o for o in listed if o.env and o.env.startswith("LLAMA_ARG_")]) == 145
    by_disposition = {d: sum(len(o.spellings) for o in OPTIONS if o.disposition is d) for d in Disposition}
    assert list(by_disposition.values()) == [309, 56, 4, 17, 26]


@pytest.mark.parametrize("option", OPTIONS, ids=lambda option: option.spellings[0])
def test_every_spelling_is_an_option_string_of_lfmserves(option: Option) -> None:
    assert [name for name in option.spellings if name not in ACTIONS] == []
    assert len({ACTIONS[name] for name in option.spellings if not taken(option) or name not in option.negative}) == 1


@pytest.mark.parametrize("option", TAKEN, ids=lambda option: option.spellings[0])
def test_a_taken_spelling_sets_its_field_as_llama_server_does(option: Option) -> None:
    action = ACTIONS[option.spellings[0]]
    if option.values == 0:
        assert action.nargs == 0
        for name in option.spellings:
            assert getattr(_group_of(action.dest, _parse([name])), action.dest) is (name not in option.negative)
        return
    assert action.nargs == (None if option.values == 1 else option.values)
    values = [_sample(action)] * option.values
    assert {_parse([name, *values]) for name in option.spellings} == {_parse([option.spellings[0], *values])}


@pytest.mark.parametrize("option", [o for o in TAKEN if o.env], ids=lambda option: option.spellings[0])
def test_a_taken_options_variable_gives_what_its_flag_gives(option: Option) -> None:
    action = ACTIONS[option.spellings[0]]
    assert option.env is not None
    if option.values == 0:
        assert _parse([], {option.env: "1"}) == _parse([option.spellings[0]])
        if option.negative:
            assert _parse([], {option.variables[0]: "1"}) == _parse([option.negative[0]])
            assert _parse([], {option.variables[0]: "", option.env: "1"}) == _parse([option.negative[0]])
        return
    value = _sample(action)
    assert _parse([], {option.env: value}) == _parse([option.spellings[0], value])


@pytest.mark.parametrize(
    "option", [o for o in OPTIONS if o.disposition is Disposition.IGNORED], ids=lambda option: option.spellings[0]
)
def test_an_ignored_option_is_accepted_with_its_values_and_named(option: Option) -> None:
    values = ["x"] * option.values
    for name in option.spellings:
        settings = _parse([name, *values, "-c", "64"])
        assert (settings.ignored, settings.engine.ctx_size) == ((name,), 64)
    for variable in option.variables:
        assert _parse([], {variable: "1"}).ignored == (variable,)
        assert _parse([option.spellings[0], *values], {variable: "1"}).ignored == (option.spellings[0],)


@pytest.mark.parametrize(
    "option",
    [o for o in OPTIONS if o.disposition in (Disposition.LATER, Disposition.REFUSED)],
    ids=lambda option: option.spellings[0],
)
def test_a_later_or_refused_option_stops_the_start_naming_it(
    option: Option, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in option.spellings:
        assert _refusal([name, "1"], {}, capsys) == f"lfmserve: error: {name}: {option.why} (see --help)\n"
    for variable in option.variables:
        message = f"lfmserve: error: environment variable {variable}: {option.why} (see --help)\n"
        assert _refusal([], {variable: "1"}, capsys) == message


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-c4096"], "unrecognized arguments: -c4096"),
        (["--ctx", "4096"], "unrecognized arguments: --ctx 4096"),
        (["-sv"], "unrecognized arguments: -sv"),
        (["-sp"], "-sp: not implemented yet"),
        (["--rpc", "x"], "--rpc: not implemented yet"),
    ],
)
def test_nothing_is_misread(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """argparse would read ``-sv`` as ``-s v`` and ``-ag`` as ``--alias g``; llama-server's spellings are whole."""
    assert _refusal(argv, {}, capsys) == f"lfmserve: error: {message} (see --help)\n"


def test_device_flags_are_read_into_their_fields_not_misread() -> None:
    settings = _parse("-sm none -mg 0 -ts 1,1 -ot exps=CPU --cpu-moe --ctx-size=512".split())
    assert (settings.sampling.seed, settings.source.model, settings.source.alias, settings.engine.ctx_size) == (
        None,
        None,
        None,
        512,
    )
    assert settings.devices == DeviceSettings(
        split_mode="none", tensor_split=(1.0, 1.0), override_tensor=("exps=CPU",), cpu_moe=True
    )
    assert settings.ignored == ()
    assert ignored_line(("LLAMA_ARG_DEFRAG_THOLD",)) == (
        "llama-server options ignored: LLAMA_ARG_DEFRAG_THOLD (deprecated: llama-server ignores it too)"
    )


def test_variables_in_order_of_precedence(capsys: pytest.CaptureFixture[str]) -> None:
    both = {"LFMSERVE_CTX_SIZE": "1024", "LLAMA_ARG_CTX_SIZE": "2048"}
    assert (_parse([], both).engine.ctx_size, _parse(["-c", "4096"], both).engine.ctx_size) == (1024, 4096)
    assert _parse([], {"LLAMA_ARG_CTX_SIZE": "2048"}).engine.ctx_size == 2048
    assert _parse([], {"LLAMA_ARG_NO_JINJA": "0", "LLAMA_ARG_JINJA": "1"}).chat.jinja is False  # set at all: off
    assert _parse(["--jinja"], {"LLAMA_ARG_NO_JINJA": "1"}).chat.jinja is True
    assert _parse(["--api-key", "k2"], {"LLAMA_API_KEY": "k1"}).server.api_key == ("k2",)
    assert _parse([], {"LLAMA_ARG_CONT_BATCHING": "disabled"}).engine.cont_batching is False
    assert _refusal([], {"LLAMA_ARG_CTX_SIZE": "many"}, capsys) == (
        "lfmserve: error: environment variable LLAMA_ARG_CTX_SIZE has value 'many': not a valid int (see --help)\n"
    )
    assert _refusal([], {"LLAMA_ARG_FLASH_ATTN": "maybe"}, capsys) == (
        "lfmserve: error: environment variable LLAMA_ARG_FLASH_ATTN has value 'maybe': not one of on, off, auto "
        "(see --help)\n"
    )


def test_preset_keys_are_llama_servers_names_and_flags() -> None:
    entries = {
        "LLAMA_ARG_N_PARALLEL": "2",
        "LLAMA_ARG_NO_JINJA": "true",
        "no-context-shift": "false",
        "nr": "true",
        "LFMSERVE_CTX_SIZE": "4096",
        "sm": "none",
        "cmoe": "true",
        "LLAMA_ARG_NO_KV_OFFLOAD": "true",
        "ag": "false",
        "tools-runtime": "ssh:host",
    }
    argv = preset_argv(entries)
    assert argv == [
        "--parallel",
        "2",
        "--no-jinja",
        "--context-shift",
        "--no-repack",
        "--ctx-size",
        "4096",
        "--split-mode",
        "none",
        "--cpu-moe",
        "--no-kv-offload",
        "--no-agent",
        "--tools-runtime",
        "ssh:host",
    ]
    settings = _parse(argv)
    assert settings.devices == DeviceSettings(split_mode="none", cpu_moe=True, kv_offload=False)
    assert settings.ignored == () and not settings.agent.agent and settings.agent.tools_runtime == "ssh:host"


def _group_of(name: str, settings: Settings) -> Any:
    return next(getattr(settings, group) for group, kind in GROUPS.items() if name in kind.__dataclass_fields__)
