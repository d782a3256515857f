"""Ollama's server variables (``OLLAMA_HOST``, ``OLLAMA_NUM_PARALLEL``, ...), read as Ollama's ``envconfig`` reads
them, turned into the settings fields they stand for, so that an Ollama user's environment serves as it is.

They rank below every other source: :func:`apply_ollama` sets only the fields that no flag, ``LFMSERVE_*`` or
``LLAMA_ARG_*`` variable or llama.cpp config file (:mod:`.config_files`) gave. A router's children get the result
as flags, never the variables (a child's settings are read with no environment), so ``OLLAMA_HOST`` is where the
router listens, not its children. A variable counts as set when it is not empty once blanks and quotes around it
are trimmed, as Ollama trims them; each one set gives an :class:`OllamaVariable`, its start-up line::

    OLLAMA_NUM_PARALLEL=2: --parallel 2
    OLLAMA_CONTEXT_LENGTH=4096: --ctx-size 8192; 4096 a slot, times --parallel 2
    OLLAMA_KEEP_ALIVE=5m: not used (--models-ttl 60 given)

A malformed value is what Ollama makes of it: most are ignored with a warning (Ollama logs them, or quietly keeps
its default; lfmserve keeps its own), ``OLLAMA_HOST``'s port falls back to Ollama's default, a flash-attention value
that is no Go bool turns it on, and a KV cache type or an origin Ollama cannot start with stops the start (exit 1).
docs/ollama.md has the table.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .fields import KV_CACHE_TYPES, flag_spec, is_off_flag
from .groups import GROUPS

#: Ollama's port, where ``OLLAMA_HOST`` names none (and no ``http://`` or ``https://``).
OLLAMA_PORT = 11434
#: The origins Ollama allows besides ``OLLAMA_ORIGINS``' (``envconfig.AllowedOrigins``).
OLLAMA_LOCAL_ORIGINS = (
    *(
        origin
        for host in ("localhost", "127.0.0.1", "0.0.0.0")
        for origin in (f"http://{host}", f"https://{host}", f"http://{host}:*", f"https://{host}:*")
    ),
    "app://*",
    "file://*",
    "tauri://*",
    "vscode-webview://*",
    "vscode-file://*",
)
#: The schemes an origin without ``*`` may have in Ollama's CORS (gin's, with browser extensions allowed).
_ORIGIN_SCHEMES = (
    "http://",
    "https://",
    "chrome-extension://",
    "safari-extension://",
    "moz-extension://",
    "ms-browser-extension://",
)
#: Go's ``strconv.ParseBool``, ``ParseInt`` and ``ParseUint`` (base 10); ASCII digits only.
_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")
_GO_INT = re.compile(r"[+-]?[0-9]+")
_GO_UINT = re.compile(r"[0-9]+")
#: Go's ``time.ParseDuration``: number-unit pairs; the longest duration, int64 nanoseconds (about 292 years).
_DURATION_PART = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_NS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9}
_MAX_DURATION_NS = 2**63 - 1
#: The fields only a router reads: on a server of one model the variables that set them change nothing.
_ROUTER_FIELDS = frozenset({"models_ttl", "models_max", "models_ollama"})
_ROUTER_ONLY = "a router's: no effect on a server of one model"
_FIELDS = {f.name: f for kind in GROUPS.values() for f in dataclasses.fields(kind)}


@dataclass(frozen=True, slots=True)
class OllamaVariable:
    """One Ollama variable that is set and what it became; ``warning`` where Ollama too reads the value as wrong."""

    name: str
    value: str
    became: str
    warning: bool = False
    #: The settings fields it set (none when something outranked it): a router passes them to its models as
    #: defaults under their presets' keys, as Ollama ranks a Modelfile over these variables.
    fields: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """Its start-up line: ``OLLAMA_NUM_PARALLEL=2: --parallel 2``."""
        return f"{self.name}={self.value}: {self.became}"


@dataclass(frozen=True, slots=True)
class _Meaning:
    """What a variable's value stands for: the fields it sets, the fields whose being given leaves it unused
    whole, and what its line adds (why the value is not read as written)."""

    fields: dict[str, Any] = field(default_factory=dict)
    outranked_by: tuple[str, ...] = ()
    note: str = ""
    warning: bool = False


def apply_ollama(environ: Mapping[str, str], given: dict[str, Any]) -> tuple[OllamaVariable, ...]:
    """Set in ``given`` (the fields the command line and the other variables gave) the fields of each Ollama variable
    set that none of them gave otherwise; one :class:`OllamaVariable` for each variable set. ValueError, naming
    the variable, for a value Ollama cannot start with either.

    Example: ``apply_ollama({"OLLAMA_NUM_PARALLEL": "2"}, given)`` sets ``given["parallel"] = 2`` unless it is
    there already."""
    router = given.get("model") is None and given.get("hf_repo") is None
    variables = []
    for name, read in _READERS.items():
        value = environ.get(name, "").strip().strip("\"'").strip()
        if not value:
            continue
        try:
            meaning = read(value, given)
        except ValueError as exc:
            raise ValueError(f"environment variable {name} has value {value!r}: {exc}") from None
        outranking = {f: given[f] for f in meaning.outranked_by if f in given}
        whole = bool(outranking)
        outranking |= {f: given[f] for f, v in meaning.fields.items() if f in given and given[f] != v}
        used = {} if whole else {f: v for f, v in meaning.fields.items() if f not in outranking}
        given.update(used)
        became = _became(meaning, used, outranking, router)
        variables.append(OllamaVariable(name, value, became, meaning.warning, tuple(used)))
    return tuple(variables)


def _became(meaning: _Meaning, used: dict[str, Any], outranking: dict[str, Any], router: bool) -> str:
    text = _flags(used) or ("not used" if meaning.fields else "")
    if outranking:
        text += f" ({_flags(outranking)} given)"
    note = meaning.note if used or not meaning.fields else ""  # what the value stands for, unless unused
    alone = not router and used and used.keys() <= _ROUTER_FIELDS
    return "; ".join(part for part in (text, note, _ROUTER_ONLY if alone else "") if part)


def _flags(fields: Mapping[str, Any]) -> str:
    """Fields as their longest flags write them (``--parallel 2``, ``--log-verbose``, ``--no-models-ollama``)."""
    out = []
    for name, value in fields.items():
        flags = flag_spec(_FIELDS[name]).flags
        if isinstance(value, bool):  # the switch's spelling for it, else its flag's --x=false
            spellings = [flag for flag in flags if is_off_flag(flag) != value]
            out.append(max(spellings, key=len) if spellings else f"{max(flags, key=len)}={str(value).lower()}")
        else:
            out.append(f"{max(flags, key=len)} {value}")
    return " ".join(out)


def _host(value: str, given: Mapping[str, Any]) -> _Meaning:
    """``envconfig.Host``: ``[scheme://]host[:port][/path]``. No port is 11434 (80 after ``http://``, 443 after
    ``https://``), and so is a port that is not one, with a warning; no host is 127.0.0.1, an empty one before a
    port every address (Go listens on all for ``:port``)."""
    default_port = str(OLLAMA_PORT)
    scheme, sep, hostport = value.partition("://")
    if not sep:
        hostport = scheme
    elif scheme in ("http", "https"):
        default_port = "80" if scheme == "http" else "443"
    hostport = hostport.partition("/")[0]
    split = _split_host_port(hostport)
    if split is None:
        host, port = _ip_text(hostport.strip("[]")) or hostport or "127.0.0.1", default_port
    else:
        host, port = split
    if _GO_INT.fullmatch(port) and 0 <= int(port) <= 65535:
        return _Meaning({"host": host or "0.0.0.0", "port": int(port)})
    note = f"port {port!r} is not a port: Ollama's default"
    return _Meaning({"host": host or "0.0.0.0", "port": int(default_port)}, note=note, warning=True)


def _split_host_port(hostport: str) -> tuple[str, str] | None:
    """Go's ``net.SplitHostPort`` (``host:port``, ``[v6]:port``); None where it fails."""
    colon = hostport.rfind(":")
    if colon < 0:
        return None
    start = end = 0
    if hostport.startswith("["):
        close = hostport.find("]")
        if close < 0 or close + 1 != colon:
            return None
        host, start, end = hostport[1:close], 1, close + 1
    else:
        host = hostport[:colon]
        if ":" in host:
            return None
    if "[" in hostport[start:] or "]" in hostport[end:]:
        return None
    return host, hostport[colon + 1 :]


def _ip_text(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _keep_alive(value: str, given: Mapping[str, Any]) -> _Meaning:
    """``envconfig.KeepAlive``: a Go duration (``5m``, ``1h30m``, ``-1s``), else whole seconds; negative is for
    ever, 0 unloads a model as soon as it is idle. ``--models-ttl`` holds whole seconds (rounded up), its 0 for
    ever."""
    seconds = _duration_s(value)
    if seconds is None and _GO_INT.fullmatch(value) and abs(int(value)) * 10**9 <= _MAX_DURATION_NS:
        seconds = float(int(value))
    if seconds is None:
        return _ignored("not a duration ('5m', '-1') nor whole seconds")
    if seconds < 0:
        return _Meaning({"models_ttl": 0}, note="for ever")
    if seconds == 0:
        return _Meaning({"models_ttl": 1}, note="1 s, the shortest: --models-ttl 0 keeps models for ever")
    note = "" if seconds.is_integer() else "whole seconds, rounded up"
    return _Meaning({"models_ttl": math.ceil(seconds)}, note=note)


def _duration_s(text: str) -> float | None:
    """Go's ``time.ParseDuration`` in seconds (None where it fails): a sign, then number-unit pairs, or ``0``."""
    sign = -1.0 if text.startswith("-") else 1.0
    rest = text[1:] if text[:1] in ("-", "+") else text
    if rest == "0":
        return 0.0
    parts = _DURATION_PART.findall(rest)
    if not rest or "".join(number + unit for number, unit in parts) != rest:
        return None
    ns = sum(float(number) * _UNIT_NS[unit] for number, unit in parts)
    return None if ns > _MAX_DURATION_NS else sign * ns / 1e9


def _whole(value: str) -> int | None:
    """Go's ``strconv.ParseUint``, as ``envconfig.Uint`` reads its variables."""
    return int(value) if _GO_UINT.fullmatch(value) and int(value) < 2**64 else None


def _ignored(why: str) -> _Meaning:
    return _Meaning(note=f"ignored, {why}: Ollama too keeps its default", warning=True)


def _num_parallel(value: str, given: Mapping[str, Any]) -> _Meaning:
    """``envconfig.NumParallel``: slots per model; 0 is 1, as Ollama's scheduler reads it."""
    count = _whole(value)
    return _ignored("not a whole number") if count is None else _Meaning({"parallel": max(count, 1)})


def _context_length(value: str, given: Mapping[str, Any]) -> _Meaning:
    """``envconfig.ContextLength``: a request's context, so the engine's is that times the slots (``-c`` = N x
    ``-np``), as Ollama starts llama-server; 0 is Ollama's default. ``--kv-unified-per-slot`` outranks it too."""
    tokens = _whole(value)
    if tokens is None:
        return _ignored("not a whole number")
    if tokens == 0:
        return _Meaning(note="0 is Ollama's default: --ctx-size keeps lfmserve's")
    parallel = given.get("parallel", _FIELDS["parallel"].default)
    note = f"{tokens} a slot, times --parallel {parallel}"
    return _Meaning({"ctx_size": tokens * parallel}, outranked_by=("kv_unified_per_slot",), note=note)


def _max_loaded_models(value: str, given: Mapping[str, Any]) -> _Meaning:
    """``envconfig.MaxRunners``: models loaded at once; 0 is Ollama's own count (3 a GPU)."""
    count = _whole(value)
    if count is None:
        return _ignored("not a whole number")
    if count == 0:
        return _Meaning(note="0 is Ollama's default: --models-max keeps lfmserve's")
    return _Meaning({"models_max": count})


def _max_queue(value: str, given: Mapping[str, Any]) -> _Meaning:
    """``envconfig.MaxQueue``: requests that may wait (each model's queue here, the server's in Ollama)."""
    count = _whole(value)
    return _ignored("not a whole number above 0") if not count else _Meaning({"max_queue": count})


def _flash_attention(value: str, given: Mapping[str, Any]) -> _Meaning:
    """``envconfig.FlashAttention``: a Go bool; any other value turns it on, as Ollama reads it."""
    if value in _GO_FALSE:
        return _Meaning({"flash_attn": "off"})
    note = "" if value in _GO_TRUE else "not a Go bool (1, true, 0, false...): on, as Ollama reads it"
    return _Meaning({"flash_attn": "on"}, note=note, warning=bool(note))


def _kv_cache_type(value: str, given: Mapping[str, Any]) -> _Meaning:
    """``envconfig.KvCacheType``: both caches' type, lower-cased; one llama-server does not know stops the start
    (Ollama hands it to llama-server, which refuses it)."""
    kind = value.lower()
    if kind not in KV_CACHE_TYPES:
        raise ValueError(f"not one of {', '.join(KV_CACHE_TYPES)}")
    return _Meaning({"cache_type_k": kind, "cache_type_v": kind})


def _origins(value: str, given: Mapping[str, Any]) -> _Meaning:
    """``envconfig.AllowedOrigins``: the listed origins (lower-cased, as gin compares them), then Ollama's local
    ones. An entry with one ``*`` is a pattern, ``*`` any origin; one with two, or without ``*`` and not of the
    web or a browser extension, stops the start, as it stops Ollama's."""
    listed = [entry.strip().lower() for entry in value.split(",") if entry.strip()]
    for entry in listed:
        if entry.count("*") > 1 or ("*" not in entry and not entry.startswith(_ORIGIN_SCHEMES)):
            raise ValueError(f"{entry!r} is not an origin (scheme://host[:port], one * at most)")
    return _Meaning({"cors_origins": ",".join(dict.fromkeys([*listed, *OLLAMA_LOCAL_ORIGINS]))})


def _debug(value: str, given: Mapping[str, Any]) -> _Meaning:
    """``envconfig.LogLevel``: true or 1 is DEBUG (``-lv 5``), 2 and up TRACE (``-v``: everything), false or 0
    INFO, -1 WARN, -2 ERROR, less nothing; ``-lv`` and ``-v`` outrank it."""
    if value in _GO_TRUE:
        level = 1
    elif _GO_INT.fullmatch(value):
        level = int(value)
    elif value in _GO_FALSE:
        level = 0
    else:
        return _ignored("not a bool or a level")
    if level >= 2:
        fields: dict[str, Any] = {"verbose": True}
    else:  # -lv: 3 is INFO, 5 DEBUG, each step down one level up
        fields = {"log_verbosity": 5 if level == 1 else max(3 + level, 0)}
    return _Meaning(fields, outranked_by=("log_verbosity", "verbose"))


def _models(value: str, given: Mapping[str, Any]) -> _Meaning:
    """``OLLAMA_MODELS``: ``--models-ollama``'s own variable (read after ``LFMSERVE_MODELS_OLLAMA``), here for its
    line; unused under ``--no-models-ollama``."""
    off = given.get("models_ollama_enabled") is False
    return _Meaning({"models_ollama": value}, outranked_by=("models_ollama_enabled",) if off else ())


#: Each variable's reader, in the order their lines are logged (``OLLAMA_CONTEXT_LENGTH`` after the slots are known).
_READERS: dict[str, Callable[[str, Mapping[str, Any]], _Meaning]] = {
    "OLLAMA_HOST": _host,
    "OLLAMA_NUM_PARALLEL": _num_parallel,
    "OLLAMA_CONTEXT_LENGTH": _context_length,
    "OLLAMA_MAX_LOADED_MODELS": _max_loaded_models,
    "OLLAMA_KEEP_ALIVE": _keep_alive,
    "OLLAMA_MAX_QUEUE": _max_queue,
    "OLLAMA_FLASH_ATTENTION": _flash_attention,
    "OLLAMA_KV_CACHE_TYPE": _kv_cache_type,
    "OLLAMA_ORIGINS": _origins,
    "OLLAMA_DEBUG": _debug,
    "OLLAMA_MODELS": _models,
}
