"""llama-server's sampler flags as sampling defaults and request-wide settings: each flag's parsed value, its
variable, its errors (exit 1, one line), and the flags that reproduce it."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from lfmserve import sampler_order
from lfmserve.settings import SamplingSettings, Settings
from lfmserve.settings.argv import preset_argv
from lfmserve.settings.sampler_flags import sampler_codes, sampler_names


def _parse(argv: list[str], environ: dict[str, str] | None = None) -> SamplingSettings:
    return Settings.from_argv(argv, environ=environ or {}).sampling


def _error(argv: list[str], environ: dict[str, str] | None, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        _parse(argv, environ)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("lfmserve: error: ") and err.endswith(" (see --help)\n")
    return err.removeprefix("lfmserve: error: ").removesuffix(" (see --help)\n")


EVERY_DEFAULT = (
    "--dynatemp-range 0.5 --dynatemp-exp 1.5 --top-nsigma 1.25 --xtc-probability 0.5 --xtc-threshold 0.2 "
    "--typical 0.9 --repeat-last-n -1 --presence-penalty 0.25 --frequency-penalty -0.5 --dry-multiplier 0.8 "
    "--dry-base 2 --dry-allowed-length 3 --dry-penalty-last-n 0 --dry-sequence-breaker ; --mirostat 2 "
    "--mirostat-ent 4.5 --mirostat-lr 0.2 --adaptive-target 0.4 --adaptive-decay 0.8 --samplers top_k;temp"
).split()


def test_each_flag_sets_its_sampling_default() -> None:
    assert _parse(EVERY_DEFAULT).defaults() == {
        "dynatemp_range": 0.5,
        "dynatemp_exponent": 1.5,
        "top_n_sigma": 1.25,
        "xtc_probability": 0.5,
        "xtc_threshold": 0.2,
        "typical_p": 0.9,
        "repeat_last_n": -1,
        "presence_penalty": 0.25,
        "frequency_penalty": -0.5,
        "dry_multiplier": 0.8,
        "dry_base": 2.0,
        "dry_allowed_length": 3,
        "dry_penalty_last_n": 0,
        "dry_sequence_breakers": (";",),
        "mirostat": 2,
        "mirostat_tau": 4.5,
        "mirostat_eta": 0.2,
        "adaptive_target": 0.4,
        "adaptive_decay": 0.8,
        "samplers": ("top_k", "temperature"),
    }
    assert _parse([]).defaults() == {}


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--top-n-sigma", "2"], "top_n_sigma", 2.0),
        (["--typical-p", "0.95"], "typical_p", 0.95),
        (["--mirostat", "0"], "mirostat", 0),
        (["--mirostat", "1"], "mirostat", 1),
        (["--repeat-last-n", "0"], "repeat_last_n", 0),
        (["--dry-penalty-last-n", "128"], "dry_penalty_last_n", 128),
        (["--dry-base", "1.0"], "dry_base", 1.0),
        (["--dry-base", "0.99"], "dry_base", None),  # llama-server ignores a base below 1
        (["--dry-base", "3", "--dry-base", "0.5"], "dry_base", 3.0),  # ... so the earlier one stays
        (["--keep", "-1"], "n_keep", -1),
        (["--keep", "32"], "n_keep", 32),
        ([], "n_keep", 0),
        (["--ignore-eos"], "ignore_eos", True),
        ([], "ignore_eos", False),
    ],
)
def test_a_flags_value(argv: list[str], field: str, value: object) -> None:
    assert getattr(_parse(argv), field) == value


def test_the_penalties_variables_are_llama_servers() -> None:
    environ = {"LLAMA_ARG_PRESENCE_PENALTY": "1.5", "LLAMA_ARG_FREQUENCY_PENALTY": "-0.25"}
    assert (_parse([], environ).presence_penalty, _parse([], environ).frequency_penalty) == (1.5, -0.25)
    assert _parse(["--presence-penalty", "0.5"], environ).presence_penalty == 0.5
    assert _parse([], {**environ, "LFMSERVE_PRESENCE_PENALTY": "2"}).presence_penalty == 2.0


@pytest.mark.parametrize(
    ("argv", "samplers"),
    [
        (["--samplers", "top_k;temp;Min-P"], ("top_k", "temperature", "min_p")),
        (
            ["--samplers", "penalties;DRY;top-n-sigma;topk;typ;nucleus;min_p;xtc;temperature"],
            sampler_order.DEFAULT_ORDER,
        ),
        (["--samplers", "adaptive_p;;infill"], ("adaptive_p", "infill")),  # an empty name is dropped
        (["--samplers", ""], ()),
        (["--sampling-seq", "kt"], ("top_k", "temperature")),
        (["--sampler-seq", "edskypmxt"], sampler_order.DEFAULT_ORDER),
        (["--sampling-seq", ""], ()),
        (["--samplers", "top_k", "--sampling-seq", "mt"], ("min_p", "temperature")),  # the later wins
        (["--sampling-seq", "mt", "--samplers", "top_k"], ("top_k",)),
        ([], None),
    ],
)
def test_samplers_and_sampling_seq_set_one_order(argv: list[str], samplers: tuple[str, ...] | None) -> None:
    assert _parse(argv).samplers == samplers


def _outcome(read: Callable[[str], tuple[str, ...]], text: str) -> tuple[str, ...] | None:
    try:
        return read(text)
    except (ValueError, argparse.ArgumentTypeError):
        return None


def test_every_spelling_llama_server_takes_is_a_sampler_name() -> None:
    """Canonical names, kebab-case and no-underscore forms in any case, and llama-server's three aliases."""
    spellings = "Top-K;TOPK;nucleus;temp;typ;typ-p;minp;TOP-N-SIGMA;adaptivep;penalties"
    assert sampler_names(spellings) == (
        "top_k",
        "top_k",
        "top_p",
        "temperature",
        "typ_p",
        "typ_p",
        "min_p",
        "top_n_sigma",
        "adaptive_p",
        "penalties",
    )
    assert _outcome(sampler_names, "top_n-sigma") is None  # half kebab: llama-server does not know it either
    assert _outcome(sampler_codes, "K") is None  # letters are lower case


@pytest.mark.parametrize(
    ("argv", "breakers"),
    [
        ([], None),  # llama-server's breakers (\n : " *)
        (["--dry-sequence-breaker", "\n"], ("\n",)),  # the first replaces the defaults
        (["--dry-sequence-breaker", "a", "--dry-sequence-breaker", "bc"], ("a", "bc")),
        (["--dry-sequence-breaker", "none"], ()),
        (["--dry-sequence-breaker", "a", "--dry-sequence-breaker", "none"], ()),
        (["--dry-sequence-breaker", "a", "--dry-sequence-breaker", "none", "--dry-sequence-breaker", "b"], ("b",)),
    ],
)
def test_dry_sequence_breakers(argv: list[str], breakers: tuple[str, ...] | None) -> None:
    assert _parse(argv).dry_sequence_breakers == breakers


def test_dry_sequence_breakers_from_the_environment_and_settings() -> None:
    assert _parse([], {"LFMSERVE_DRY_SEQUENCE_BREAKERS": "none"}).dry_sequence_breakers == ()
    assert _parse(["--dry-sequence-breaker", "x"], {"LFMSERVE_DRY_SEQUENCE_BREAKERS": "y"}).dry_sequence_breakers == (
        "x",
    )
    assert SamplingSettings(dry_sequence_breakers=("a", "none", "b")).dry_sequence_breakers == ("b",)


@pytest.mark.parametrize(
    ("argv", "biases"),
    [
        (["-l", "15043+1"], ((15043, 1.0),)),
        (["--logit-bias", "15043-1.5"], ((15043, -1.5),)),
        (["-l", "2-inf"], ((2, float("-inf")),)),
        (["-l", " 7 + 0.25 "], ((7, 0.25),)),
        (["-l", "1+2", "-l", "3-4e-1"], ((1, 2.0), (3, -0.4))),
        ([], ()),
    ],
)
def test_logit_bias(argv: list[str], biases: tuple[tuple[int, float], ...]) -> None:
    assert _parse(argv).logit_bias == biases


def test_logit_bias_from_the_environment() -> None:
    assert _parse([], {"LFMSERVE_LOGIT_BIAS": "15043-2"}).logit_bias == ((15043, -2.0),)


def test_grammar_and_json_schema_are_read_when_the_flag_is(tmp_path: Path) -> None:
    grammar = tmp_path / "g.gbnf"
    grammar.write_text('root ::= "yes" | "no"\n', encoding="utf-8")
    schema = tmp_path / "s.json"
    schema.write_text('{"type": "object", "required": ["a"]}', encoding="utf-8")
    assert _parse(["--grammar", 'root ::= "a"']).grammar == 'root ::= "a"'
    assert _parse(["--grammar-file", str(grammar)]).grammar == 'root ::= "yes" | "no"\n'
    from_text = _parse(["-j", '{"type": "string"}'])
    assert (from_text.json_schema, from_text.json_schema_value) == ('{"type": "string"}', {"type": "string"})
    from_file = _parse(["-jf", str(schema)])
    assert (from_file.json_schema, from_file.json_schema_value) == (
        '{"type": "object", "required": ["a"]}',
        {"type": "object", "required": ["a"]},
    )
    assert _parse(["--json-schema", "true"]).json_schema_value is True
    assert (_parse([]).grammar, _parse([]).json_schema, _parse([]).json_schema_value) == (None, None, None)


@pytest.mark.parametrize(
    ("argv", "environ", "grammar", "schema"),
    [
        (["--grammar", "g", "-j", "{}"], {}, None, "{}"),  # one grammar slot: the later wins
        (["-j", "{}", "--grammar", "g"], {}, "g", None),
        (["--json-schema", "{}", "--grammar", "g", "--json-schema", "true"], {}, None, "true"),
        (["--grammar", "g"], {"LFMSERVE_JSON_SCHEMA": "{}"}, "g", None),  # the command line replaces the variable
        (["-j", "{}"], {"LFMSERVE_GRAMMAR": "g"}, None, "{}"),
        ([], {"LFMSERVE_GRAMMAR": "g"}, "g", None),
    ],
)
def test_the_later_of_grammar_and_json_schema_wins(
    argv: list[str], environ: dict[str, str], grammar: str | None, schema: str | None
) -> None:
    settings = _parse(argv, environ)
    assert (settings.grammar, settings.json_schema) == (grammar, schema)


def test_both_grammars_at_once_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    message = (
        "grammar and json_schema are both set: give one, as llama-server keeps one grammar (on the command line, "
        "the later of --grammar and --json-schema wins)"
    )
    assert _error([], {"LFMSERVE_GRAMMAR": "g", "LFMSERVE_JSON_SCHEMA": "{}"}, capsys) == message
    with pytest.raises(ValueError, match="^grammar and json_schema are both set"):
        Settings.of(grammar="g", json_schema="{}")


KNOWN = "dry, top_k, typ_p, top_p, top_n_sigma, min_p, temperature, xtc, infill, penalties, adaptive_p"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--samplers", "top_k;bogus"], f"argument --samplers: unknown sampler 'bogus' (known: {KNOWN})"),
        (
            ["--sampling-seq", "ktq"],
            "argument --sampler-seq/--sampling-seq: unknown sampler letter 'q' (known: dkypsmtxiea)",
        ),
        (["--presence-penalty", "inf"], "argument --presence-penalty: 'inf' is not finite"),
        (["--frequency-penalty", "nan"], "argument --frequency-penalty: 'nan' is not finite"),
        (["--frequency-penalty", "x"], "argument --frequency-penalty: invalid float value: 'x'"),
        (["--dry-penalty-last-n", "-1"], "argument --dry-penalty-last-n: invalid dry-penalty-last-n = -1"),
        (["--repeat-last-n", "-2"], "argument --repeat-last-n: invalid repeat-last-n = -2"),
        (["--keep", "-2"], "argument --keep: invalid keep = -2"),
        (["--mirostat", "3"], "argument --mirostat: invalid choice: 3 (choose from 0, 1, 2)"),
        (
            ["-l", "15043"],
            "argument -l/--logit-bias: invalid input format: '15043' (expected TOKEN_ID(+/-)BIAS)",
        ),
        (
            ["--logit-bias", "15043+x"],
            "argument -l/--logit-bias: invalid input format: '15043+x' (expected TOKEN_ID(+/-)BIAS)",
        ),
        (
            ["--grammar-file", "/no/such/g.gbnf"],
            "argument --grammar-file: failed to open file '/no/such/g.gbnf': No such file or directory",
        ),
        (
            ["-j", '{"type":'],
            "argument -j/--json-schema: invalid JSON schema '{\"type\":': Expecting value: line 1 column 9 (char 8)",
        ),
        (["-j", "[1]"], "argument -j/--json-schema: invalid JSON schema '[1]': not an object, true or false"),
        (
            ["-jf", "/no/such/s.json"],
            "argument -jf/--json-schema-file: failed to open file '/no/such/s.json': No such file or directory",
        ),
    ],
)
def test_a_bad_value_stops_the_start_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _error(argv, {}, capsys) == message


def test_a_json_schema_file_that_is_not_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{nope", encoding="utf-8")
    assert _error(["-jf", str(bad)], {}, capsys) == (
        f"argument -jf/--json-schema-file: invalid JSON schema in '{bad}': Expecting property name enclosed in "
        "double quotes: line 1 column 2 (char 1)"
    )


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"LLAMA_ARG_PRESENCE_PENALTY": "inf"}, "environment variable LLAMA_ARG_PRESENCE_PENALTY: 'inf' is not finite"),
        (
            {"LLAMA_ARG_FREQUENCY_PENALTY": "-inf"},
            "environment variable LLAMA_ARG_FREQUENCY_PENALTY: '-inf' is not finite",
        ),
        ({"LFMSERVE_MIROSTAT": "3"}, "environment variable LFMSERVE_MIROSTAT has value '3': not one of 0, 1, 2"),
        (
            {"LFMSERVE_SAMPLERS": "top_k;x"},
            f"environment variable LFMSERVE_SAMPLERS: unknown sampler 'x' (known: {KNOWN})",
        ),
        (
            {"LFMSERVE_LOGIT_BIAS": "1"},
            "environment variable LFMSERVE_LOGIT_BIAS: invalid input format: '1' (expected TOKEN_ID(+/-)BIAS)",
        ),
    ],
)
def test_a_bad_variable_stops_the_start_naming_it(
    environ: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _error([], environ, capsys) == message


def test_the_environment_converts_to_the_fields_types() -> None:
    environ = {"LFMSERVE_MIROSTAT": "1", "LFMSERVE_SAMPLERS": "top_k;temp", "LFMSERVE_DRY_BASE": "0.5"}
    settings = _parse([], environ)
    assert (settings.mirostat, settings.samplers, settings.dry_base) == (1, ("top_k", "temperature"), None)


@pytest.mark.parametrize(
    "argv",
    [
        EVERY_DEFAULT,
        ["--sampling-seq", "", "--dry-sequence-breaker", "none", "--ignore-eos", "--keep", "-1"],
        ["-l", "1+2", "-l", "3-inf", "-l", "4-0.5", "--grammar", "-root ::= x", "--dry-sequence-breaker", "-"],
        ["-j", '{"type": "object"}', "--samplers", "xtc;typ_p"],
    ],
)
def test_to_argv_reproduces_the_sampler_flags(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in [name for name in os.environ if name.startswith("LFMSERVE_")]:
        monkeypatch.delenv(variable)
    settings = Settings.from_argv(argv)
    assert Settings.from_argv(settings.to_argv()) == settings


def test_to_argv_writes_the_values_as_flags_take_them() -> None:
    settings = Settings.of(samplers=("top_k", "temperature"), logit_bias=((2, float("-inf")), (3, 1.5)))
    assert settings.replace(dry_sequence_breakers=()).to_argv() == [
        "--dry-sequence-breaker",
        "none",
        "--samplers",
        "top_k;temperature",
        "--logit-bias",
        "2-inf",
        "--logit-bias",
        "3+1.5",
    ]


def test_preset_keys_for_the_sampler_order_keep_their_form() -> None:
    entries = {"sampling-seq": "kt", "samplers": "min_p", "LFMSERVE_SAMPLERS": "xtc", "l": "1+1"}
    assert preset_argv(entries) == [
        "--sampling-seq",
        "kt",
        "--samplers",
        "min_p",
        "--samplers",
        "xtc",
        "--logit-bias",
        "1+1",
    ]
    assert _parse(preset_argv({"sampler-seq": "mt"})).samplers == ("min_p", "temperature")
