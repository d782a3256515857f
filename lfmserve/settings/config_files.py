"""llama.cpp's config files, read as the pinned llama.cpp reads them (``common_params_apply_system_config`` in
common/arg.cpp): ``/etc/llama.cpp/config.ini``, then ``${XDG_CONFIG_HOME:-~/.config}/llama.cpp/config.ini``, a
later file over an earlier one, and under the environment and the command line (llama.cpp applies them first).

Each file is a router preset's INI (:mod:`.ini`): its ``[*]`` section applies, then the keys written before any
section (or under ``[default]``); other sections are read for their keys' sake and not applied. A key is a flag
without its dashes, long or short, or a variable (``ctx-size``, ``c``, ``LLAMA_ARG_CTX_SIZE``), as a preset's;
a key no option takes is skipped with a warning, because every llama.cpp program reads the same file and each knows
only its own options. As in llama-server, there is no switch to skip them. Example
(``~/.config/llama.cpp/config.ini``)::

    ctx-size = 8192
    jinja = true
    [*]
    parallel = 2
"""

from __future__ import annotations

import configparser
import os
import pwd
import sys
from collections.abc import Iterable, Mapping

from .argv import preset_argv, unknown_preset_keys
from .ini import DEFAULT_SECTION, GLOBAL_SECTION, read_ini

#: The system-wide file, read first (a module constant, so that tests can point it elsewhere).
SYSTEM_CONFIG = "/etc/llama.cpp/config.ini"
#: Keys that only a router's preset reads (llama.cpp's ``common_params_add_preset_options``): known, no effect here.
_PRESET_ONLY = frozenset({"load-on-startup", "stop-timeout", "dedup-cache-models"})


def config_paths(environ: Mapping[str, str]) -> list[str]:
    """Where llama.cpp looks, in its order: :data:`SYSTEM_CONFIG`, then ``llama.cpp/config.ini`` in
    ``XDG_CONFIG_HOME``, else in ``HOME``'s ``.config`` (the password database's home when ``HOME`` is unset or
    empty); no second path when no home is found, as llama.cpp then skips it."""
    folder = environ.get("XDG_CONFIG_HOME") or _home_config(environ)
    user = [os.path.join(folder, "llama.cpp", "config.ini")] if folder else []
    return [SYSTEM_CONFIG, *user]


def _home_config(environ: Mapping[str, str]) -> str:
    home = environ.get("HOME")
    if not home:
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:  # a user id the database does not have
            return ""
    return os.path.join(home, ".config") if home else ""


def config_argv(paths: Iterable[str]) -> list[str]:
    """The flags the files at ``paths`` that exist stand for, in the order they apply (a later one over an earlier
    one). For each file, llama.cpp's line ``using config file: PATH``, then a warning for each key no option takes
    (``ignoring option 'KEY' from PATH: not supported by this program``), on stderr. A file that cannot be read or
    parsed exits 1 with llama.cpp's message, and so does a switch whose value is neither true nor false."""
    argv: list[str] = []
    for path in paths:
        if os.path.exists(path):
            argv += _file_argv(path)
    return argv


def _file_argv(path: str) -> list[str]:
    _say(f"using config file: {path}")
    try:
        sections = read_ini(path)
    except OSError:
        raise SystemExit(f"lfmserve: error: failed to open server preset file: {path}") from None
    except (configparser.Error, UnicodeDecodeError):  # a line that is no section, key = value or comment
        raise SystemExit(f"lfmserve: error: failed to parse server config file: {path}") from None
    unknown: set[str] = set()
    for name in sorted(sections):  # in llama.cpp's order: its std::map sorts the sections and their keys
        for key in unknown_preset_keys(sorted(sections[name].keys() - _PRESET_ONLY)):
            _say(f"ignoring option '{key}' from {path}: not supported by this program")
            unknown.add(key)
    argv: list[str] = []
    for name in (GLOBAL_SECTION, DEFAULT_SECTION):
        entries = sections.get(name, {})
        try:
            argv += preset_argv({k: v for k, v in entries.items() if k not in unknown and k not in _PRESET_ONLY})
        except ValueError as exc:
            raise SystemExit(f"lfmserve: error: config file {path}, section [{name}]: {exc}") from None
    return argv


def _say(line: str) -> None:
    """One of llama.cpp's lines about its config files. It prints them as it reads its arguments, before they set
    up its log, so they come plain on stderr whatever ``--log-*`` says; here too (logging is not set up yet)."""
    print(line, file=sys.stderr, flush=True)
