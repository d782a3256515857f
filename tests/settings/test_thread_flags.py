"""llama-server's thread-placement flags read as its ``common/arg.cpp`` reads them: ``--numa``, ``-C`` / ``-Cr`` (hex
masks of any length, ranges), ``--cpu-strict``, ``--prio``, ``--poll``, their batch and draft forms, and the
placement each threadpool gets from them."""

from __future__ import annotations

import argparse

import pytest

from lfmserve.engine.records import CpuPlacement, ThreadPlacement
from lfmserve.loading.engine_config import engine_config, thread_placement
from lfmserve.settings import Settings
from lfmserve.settings.placement import MAX_CPUS, parse_cpu_mask, parse_cpu_range


def _parse(*argv: str, environ: dict[str, str] | None = None) -> Settings:
    return Settings.from_argv(list(argv), environ=environ or {})


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        _parse(*argv)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lfmserve: error: argument ")
    return err


@pytest.mark.parametrize(
    ("mask", "cpus"),
    [
        ("0x1", (0,)),
        ("5", (0, 2)),
        ("0xF0", (4, 5, 6, 7)),
        ("0xaB", (0, 1, 3, 5, 7)),
        ("", ()),  # given, but no CPU: ggml's default placement
        ("0x", ()),
        ("0x0000", ()),
        ("1" + "0" * 16, (64,)),  # past 64 bits
        ("8" + "0" * 31, (127,)),
        ("1" + "0" * 127, (508,)),  # the 128th digit is the highest ggml names
        ("f" * 128, tuple(range(MAX_CPUS))),
        ("1" + "0" * 128, (508,)),  # past 128 digits, llama.cpp reads the first 128 as the whole mask
        ("3" + "0" * 127 + "zz", (508, 509)),  # ... and never looks at the rest
    ],
)
def test_a_hex_mask_of_any_length_names_its_cpus(mask: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpu_mask(mask) == cpus


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        ("zz", "invalid cpumask 'zz': invalid hex character 'z' at position 0"),
        ("0x1g", "invalid cpumask '0x1g': invalid hex character 'g' at position 3"),
        ("0X1", "invalid cpumask '0X1': invalid hex character 'X' at position 1"),  # only a lowercase 0x is a prefix
        (" 1", "invalid cpumask ' 1': invalid hex character ' ' at position 0"),
    ],
)
def test_a_mask_with_a_character_that_is_not_hex_is_refused(mask: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="^" + message.replace("(", r"\(") + "$"):
        parse_cpu_mask(mask)


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3", (0, 1, 2, 3)),
        ("1-1", (1,)),
        ("-2", (0, 1, 2)),  # no start: the first CPU
        ("510-", (510, 511)),  # no end: the last
        ("-", tuple(range(MAX_CPUS))),
        ("3-1", ()),  # backwards: no CPU, as llama.cpp's loop never runs
        (" 2-+3", (2, 3)),  # stoull's blanks and sign
        ("2x-3y", (2, 3)),  # stoull stops at the first character that is not a digit
        ("0-511", tuple(range(MAX_CPUS))),
    ],
)
def test_a_range_names_its_cpus(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpu_range(text) == cpus


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("7", "invalid range '7': expected [<start>]-[<end>]"),
        ("512-513", "invalid range '512-513': start index out of bounds (CPUs 0 to 511)"),
        ("0-512", "invalid range '0-512': end index out of bounds (CPUs 0 to 511)"),
        ("1--2", "invalid range '1--2': end index out of bounds (CPUs 0 to 511)"),  # -2 wraps around in stoull
        ("a-3", "invalid range 'a-3': 'a' is not a number"),
        ("1-b", "invalid range '1-b': 'b' is not a number"),
    ],
)
def test_a_bad_range_is_refused_naming_it(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as error:
        parse_cpu_range(text)
    assert str(error.value) == message


def test_no_flag_leaves_every_pool_on_ggmls_defaults() -> None:
    settings = _parse()
    assert thread_placement(settings.threads) == ThreadPlacement()
    assert engine_config(settings).threads == ThreadPlacement()


def test_masks_and_ranges_of_a_pool_add_up_as_llama_server_ors_them() -> None:
    threads = _parse("-C", "0x5", "-Cr", "8-9", "--cpu-mask", "0x2", "--cpu-range", "3-3").threads
    assert threads.cpu_mask == (0, 1, 2, 3, 8, 9)
    assert _parse("-Cr", "3-1").threads.cpu_mask == ()  # given, naming no CPU


def test_each_flag_reaches_its_pool_and_a_flag_not_given_follows_the_one_before_it() -> None:
    settings = _parse(
        *("--numa", "isolate", "-C", "0x3", "--cpu-strict", "1", "--prio", "-1", "--poll", "0"),
        *("-Crb", "2-3", "--prio-batch", "2"),
        *("-Cd", "10", "--poll-draft", "100"),
        *("--cpu-strict-batch-draft", "0", "--prio-batch-draft", "3"),
    )
    generation = CpuPlacement(cpus=(0, 1), strict=True, prio=-1, poll=0)
    draft = CpuPlacement(cpus=(4,), strict=True, prio=-1, poll=100)
    assert engine_config(settings).threads == ThreadPlacement(
        numa="isolate",
        generation=generation,
        batch=CpuPlacement(cpus=(2, 3), strict=True, prio=2, poll=0),
        draft=draft,
        draft_batch=CpuPlacement(cpus=(4,), strict=False, prio=3, poll=100),
    )


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--cpu-strict", "7"], "cpu_strict", True),  # any number but 0, as stoul reads it
        (["--cpu-strict", "0"], "cpu_strict", False),
        (["--cpu-strict-batch", "1"], "cpu_strict_batch", True),
        (["--spec-draft-cpu-strict", "0"], "spec_draft_cpu_strict", False),
        (["--prio", "-1"], "prio", -1),
        (["--prio", "3"], "prio", 3),
        (["--prio-batch", "0"], "prio_batch", 0),
        (["--poll", "100"], "poll", 100),
        (["--poll-batch", "0"], "poll_batch", 0),
        (["--numa", "distribute"], "numa", "distribute"),
        (["--numa", "numactl"], "numa", "numactl"),
        (["--numa", ""], "numa", "distribute"),  # llama-server's empty value
        (["--spec-draft-cpu-mask-batch", "0x30"], "spec_draft_cpu_mask_batch", (4, 5)),
        (["-Cbd", "1", "--cpu-mask-batch-draft", "2"], "spec_draft_cpu_mask_batch", (0, 1)),
        (["--spec-draft-cpu-range", "1-2", "--cpu-mask-draft", "8"], "spec_draft_cpu_mask", (1, 2, 3)),
    ],
)
def test_a_flag_sets_its_field(argv: list[str], field: str, value: object) -> None:
    assert getattr(_parse(*argv).threads, field) == value


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-C", "zz"], "argument -C/--cpu-mask: invalid cpumask 'zz': invalid hex character 'z' at position 0"),
        (["-Cr", "7"], "argument -Cr/--cpu-range: invalid range '7': expected [<start>]-[<end>]"),
        (["-Crb", "0-999"], "argument -Crb/--cpu-range-batch: invalid range '0-999': end index out of bounds"),
        (["-Cd", "0xq"], "argument --spec-draft-cpu-mask/-Cd/--cpu-mask-draft: invalid cpumask '0xq'"),
        (["--prio", "4"], "argument --prio: invalid choice: 4 (choose from -1, 0, 1, 2, 3)"),
        (["--prio-batch", "-1"], "argument --prio-batch: invalid choice: -1 (choose from 0, 1, 2, 3)"),
        (["--prio-draft", "-1"], "argument --spec-draft-prio/--prio-draft: invalid choice: -1"),
        (["--cpu-strict", "on"], "argument --cpu-strict: invalid int value: 'on'"),
        (["--poll", "x"], "argument --poll: invalid int value: 'x'"),
        (["--numa", "everywhere"], "argument --numa: invalid choice: 'everywhere'"),
    ],
)
def test_a_bad_value_stops_the_start_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in _error(capsys, *argv)


def test_llama_servers_numa_variable_sets_it_and_the_flag_wins() -> None:
    assert _parse(environ={"LLAMA_ARG_NUMA": "numactl"}).threads.numa == "numactl"
    assert _parse("--numa", "isolate", environ={"LLAMA_ARG_NUMA": "numactl"}).threads.numa == "isolate"
    assert _parse(environ={"LFMSERVE_CPU_MASK": "0x6"}).threads.cpu_mask == (1, 2)


def test_the_flags_written_back_give_the_same_settings() -> None:
    settings = _parse(
        *("--numa", "distribute", "-C", "1" + "0" * 100, "-Cr", "0-1", "--cpu-strict", "5", "--prio", "-1"),
        *("--poll", "-1", "-Cb", "0x", "--cpu-strict-batch", "0", "--prio-batch", "3", "--poll-batch", "7"),
        *("-Crd", "3-4", "--prio-draft", "1", "-Cbd", "f", "--poll-batch-draft", "9"),
    )
    argv = settings.to_argv()
    assert _parse(*argv) == settings
    assert argv[argv.index("--cpu-mask") + 1] == hex(1 << 400 | 3)
    assert argv[argv.index("--cpu-mask-batch") + 1] == "0x0"  # given without a CPU: kept given
    assert argv[argv.index("--cpu-strict") + 1] == "1"
