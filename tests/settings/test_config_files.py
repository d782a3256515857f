"""llama.cpp's config files (lfmserve/settings/config_files.py): where they are, which sections and keys apply, and
where they rank against the environment and the command line."""

from __future__ import annotations

import inspect
import os
import pwd
from pathlib import Path

import pytest

from lfmserve.settings import Settings, config_files
from lfmserve.settings.config_files import config_paths


def _write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_the_system_file_is_llama_cpps() -> None:
    # The suite points SYSTEM_CONFIG elsewhere (tests/conftest.py), so the constant is read from the source.
    assert 'SYSTEM_CONFIG = "/etc/llama.cpp/config.ini"' in inspect.getsource(config_files)


def test_the_user_file_is_in_xdg_config_home_else_in_homes_dot_config() -> None:
    system = config_files.SYSTEM_CONFIG
    assert config_paths({"XDG_CONFIG_HOME": "/x", "HOME": "/h"}) == [system, "/x/llama.cpp/config.ini"]
    assert config_paths({"XDG_CONFIG_HOME": "/x/", "HOME": "/h"}) == [system, "/x/llama.cpp/config.ini"]
    assert config_paths({"XDG_CONFIG_HOME": "", "HOME": "/h"}) == [system, "/h/.config/llama.cpp/config.ini"]
    assert config_paths({"HOME": "/h"}) == [system, "/h/.config/llama.cpp/config.ini"]
    home = pwd.getpwuid(os.getuid()).pw_dir  # no HOME: the password database's, as llama.cpp falls back to it
    assert config_paths({}) == [system, os.path.join(home, ".config", "llama.cpp", "config.ini")]


def test_both_files_are_read_in_order_the_later_winning_each_said_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    system = _write(tmp_path / "etc" / "config.ini", "ctx-size = 1000\nparallel = 3\n")
    user = _write(tmp_path / "xdg" / "llama.cpp" / "config.ini", "ctx-size = 2000\n")
    monkeypatch.setattr(config_files, "SYSTEM_CONFIG", system)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    s = Settings.from_argv([])
    assert (s.engine.ctx_size, s.engine.parallel) == (2000, 3)
    assert s.configured == ("ctx_size", "parallel")
    assert capsys.readouterr().err == f"using config file: {system}\nusing config file: {user}\n"


def test_a_missing_file_is_skipped_silently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    user = _write(tmp_path / "xdg" / "llama.cpp" / "config.ini", "ctx-size = 2000\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert Settings.from_argv([]).engine.ctx_size == 2000
    assert capsys.readouterr().err == f"using config file: {user}\n"


def test_the_global_keys_win_over_the_star_section_and_model_sections_are_not_applied(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "config.ini",
        "version = 1\nctx-size = 100\n\n[*]\nctx-size = 200\nthreads = 3\n\n[some-model]\nparallel = 7\n",
    )
    s = Settings.from_argv([], environ={}, config_files=[path])
    assert (s.engine.ctx_size, s.threads.threads, s.engine.parallel) == (100, 3, Settings().engine.parallel)


def test_a_default_section_is_the_global_keys(tmp_path: Path) -> None:
    path = _write(tmp_path / "config.ini", "[default]\nctx-size = 100\n[*]\nctx-size = 200\n")
    assert Settings.from_argv([], environ={}, config_files=[path]).engine.ctx_size == 100


def test_keys_are_a_presets_long_and_short_flags_and_variables(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "config.ini",
        "c = 3072\nnp = 3\nLLAMA_ARG_THREADS = 5\nno-jinja = true\nLFMSERVE_TEMPERATURE = 0.25\n",
    )
    s = Settings.from_argv([], environ={}, config_files=[path])
    assert (s.engine.ctx_size, s.engine.parallel, s.threads.threads) == (3072, 3, 5)
    assert (s.chat.jinja, s.sampling.temperature) == (False, 0.25)


def test_an_unknown_key_is_ignored_with_llama_cpps_warning_in_its_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(
        tmp_path / "config.ini",
        "zeta = 1\nctx-size = 512\nalpha = 2\nload-on-startup = true\n[m]\nttl = 5\n[*]\nctx_size = 9\n",
    )
    s = Settings.from_argv([], environ={}, config_files=[path])
    assert s.engine.ctx_size == 512
    assert capsys.readouterr().err == (
        f"using config file: {path}\n"
        f"ignoring option 'ctx_size' from {path}: not supported by this program\n"  # [*], then default, then m
        f"ignoring option 'alpha' from {path}: not supported by this program\n"
        f"ignoring option 'zeta' from {path}: not supported by this program\n"
        f"ignoring option 'ttl' from {path}: not supported by this program\n"
    )


@pytest.mark.parametrize("line", ["ctx-size 3072", "ctx-size: 3072", "[*"], ids=["no-equals", "colon", "header"])
def test_a_malformed_line_stops_the_start_as_llama_cpp_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    path = _write(tmp_path / "config.ini", f"parallel = 2\n{line}\n")
    with pytest.raises(SystemExit) as stopped:
        Settings.from_argv([], environ={}, config_files=[path])
    assert stopped.value.code == f"lfmserve: error: failed to parse server config file: {path}"
    assert capsys.readouterr().err == f"using config file: {path}\n"  # said before the file is parsed


def test_a_comment_after_a_value_is_not_part_of_it(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "config.ini", "; the machine's defaults\nctx-size = 3072  # tokens\nparallel = 3 ; slots\n"
    )
    s = Settings.from_argv([], environ={}, config_files=[path])
    assert (s.engine.ctx_size, s.engine.parallel) == (3072, 3)


def test_a_switch_value_that_is_neither_true_nor_false_stops_the_start(tmp_path: Path) -> None:
    path = _write(tmp_path / "config.ini", "jinja = maybe\n")
    with pytest.raises(SystemExit) as stopped:
        Settings.from_argv([], environ={}, config_files=[path])
    assert (
        stopped.value.code
        == f"lfmserve: error: config file {path}, section [default]: jinja = 'maybe': not true or false"
    )


def test_the_environment_beats_the_file_and_the_command_line_beats_both(tmp_path: Path) -> None:
    path = _write(tmp_path / "config.ini", "ctx-size = 3072\nparallel = 3\nthreads = 5\n")
    s = Settings.from_argv(["-c", "2048"], environ={"LLAMA_ARG_N_PARALLEL": "2"}, config_files=[path])
    assert (s.engine.ctx_size, s.engine.parallel, s.threads.threads) == (2048, 2, 5)
    assert s.configured == ("threads",)


def test_ollamas_variables_rank_below_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "config.ini", "parallel = 3\n")
    s = Settings.from_argv([], environ={"OLLAMA_NUM_PARALLEL": "4"}, config_files=[path])
    assert s.engine.parallel == 3
    assert [variable.line for variable in s.ollama] == ["OLLAMA_NUM_PARALLEL=4: not used (--parallel 3 given)"]


def test_an_option_ignored_on_this_build_is_named_in_the_start_up_warning(tmp_path: Path) -> None:
    path = _write(tmp_path / "config.ini", "defrag-thold = 0.1\n")
    assert Settings.from_argv([], environ={}, config_files=[path]).ignored == ("--defrag-thold",)


def test_a_callers_own_environment_reads_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "llama.cpp" / "config.ini", "ctx-size = 2000\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert Settings.from_argv([]).engine.ctx_size == 2000
    for environ in ({}, {"XDG_CONFIG_HOME": str(tmp_path)}):  # a router's children: their flags alone
        assert Settings.from_argv([], environ=environ).engine.ctx_size == Settings().engine.ctx_size
