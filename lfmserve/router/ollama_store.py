"""Ollama's model store as a source of the router's models, read in place and never written.

The store (``--models-ollama DIR``, else ``OLLAMA_MODELS``, else ``~/.ollama/models`` or the Linux service's
``/usr/share/ollama/.ollama/models`` when there; ``--no-models-ollama``: none) holds a manifest per model at
``manifests/<host>/<namespace>/<model>/<tag>``, whose layers name content-addressed blobs at
``blobs/sha256-<hex>``. A model is named as Ollama displays it (``lfm2:latest``, ``someone/custom:v1``,
``hf.co/LiquidAI/LFM2-350M-GGUF:Q4_K_M``: host and namespace shown only when they are not Ollama's defaults) and
served from its blobs, as its layers say:

- ``model``: the GGUF weights (``-m``; checked by media type and the blob's GGUF magic before any load);
  ``projector``: the first is its ``--mmproj``; ``adapter``: each a ``--lora``;
- ``params``: its defaults, under a request's own fields: sampling (``temperature`` -> ``--temp`` ...,
  ``num_predict`` -> ``-n``, ``stop`` -> ``--stop``) and, at load where no preset key or router flag sets them,
  ``num_ctx`` (a request's context, as Ollama's: ``-c`` is it times ``--parallel``), ``num_thread`` (``-t``) and
  ``num_batch`` (``-b`` and ``-ub``, as Ollama passes it);
- ``system``: ``--system-prompt-file``, the blob itself; ``messages``: ``--chat-messages-file``, the blob itself;
- ``template`` (a Go template) is not run: the GGUF's own Jinja template is; ``license`` is shown by ``/api/show``.

A manifest that cannot be served (a blob missing or not a GGUF, weights stored as Ollama's own ``tensor`` layers,
a params layer lfmserve cannot read) is still listed, with the reason as its failure, so one broken model never
hides the others or stops the router.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

from ..api.ollama.cards import StoreFacts
from ..settings import RouterSettings

logger = logging.getLogger(__name__)
#: Where Ollama keeps its store when ``OLLAMA_MODELS`` does not say: a user's install, then the Linux service's.
DEFAULT_FOLDERS = ("~/.ollama/models", "/usr/share/ollama/.ollama/models")
_PREFIX = "application/vnd.ollama.image."
MODEL, PROJECTOR, ADAPTER, PARAMS = (_PREFIX + kind for kind in ("model", "projector", "adapter", "params"))
SYSTEM, MESSAGES, LICENSE, TENSOR = (_PREFIX + kind for kind in ("system", "messages", "license", "tensor"))
_GGUF_MAGIC = b"GGUF"
_DIGEST = re.compile(r"sha256[:-]([0-9a-fA-F]{64})")
#: Ollama's name parts (``types/model/name.go``): host, namespace, model and tag patterns and length limits.
_PARTS = (
    (re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*"), 350),
    (re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*"), 80),
    (re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*"), 80),
    (re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*"), 80),
)
_DEFAULT_HOST, _DEFAULT_NAMESPACE, _DEFAULT_TAG = "registry.ollama.ai", "library", "latest"
#: Ollama's sampling options -> lfmserve's flag and the type of its value.
_SAMPLING: dict[str, tuple[str, type]] = {
    "temperature": ("--temp", float),
    "top_k": ("--top-k", int),
    "top_p": ("--top-p", float),
    "min_p": ("--min-p", float),
    "typical_p": ("--typical", float),
    "repeat_penalty": ("--repeat-penalty", float),
    "repeat_last_n": ("--repeat-last-n", int),
    "presence_penalty": ("--presence-penalty", float),
    "frequency_penalty": ("--frequency-penalty", float),
    "mirostat": ("--mirostat", int),
    "mirostat_tau": ("--mirostat-ent", float),
    "mirostat_eta": ("--mirostat-lr", float),
    "seed": ("--seed", int),
    "num_predict": ("--n-predict", int),
    "num_keep": ("--keep", int),
}
_LOAD_OPTIONS = ("num_ctx", "num_thread", "num_batch")
_ROLES = ("system", "user", "assistant", "tool")


class _Unservable(Exception):
    """Why a manifest's model cannot be served (its listed failure)."""


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """The params layer's load-time options (None: not set, or Ollama's "decide for me" 0)."""

    num_ctx: int | None = None
    num_thread: int | None = None
    num_batch: int | None = None


@dataclass(frozen=True, slots=True)
class StoreModel:
    """One manifest of the store: its name, the flags its blobs give its child, and what Ollama shows of it;
    ``problem`` says why it cannot be served (then it is listed failed and never started)."""

    name: str
    facts: StoreFacts
    argv: tuple[str, ...] = ()
    load: LoadOptions = field(default_factory=LoadOptions)
    model: str | None = None
    projector: str | None = None
    files: tuple[str, ...] = ()
    problem: str | None = None


def store_folder(router: RouterSettings) -> str | None:
    """The store the router reads: ``--models-ollama`` (or ``OLLAMA_MODELS``; empty counts as unset, as in Ollama),
    else the first default folder that has a ``manifests`` folder; None when off or there is none."""
    if not router.models_ollama_enabled:
        return None
    if router.models_ollama:
        return router.models_ollama
    for folder in DEFAULT_FOLDERS:
        path = os.path.expanduser(folder)
        if os.path.isdir(os.path.join(path, "manifests")):
            return path
    return None


def scan_store(folder: str) -> list[StoreModel]:
    """Every manifest of the store at ``folder``, by display name; a store without manifests lists none (with a
    warning). Two manifests with the same display name (their paths differ only in case) keep the first."""
    manifests = os.path.join(folder, "manifests")
    if not os.path.isdir(manifests):
        logger.warning("Ollama's store %s has no manifests folder: none of its models are listed", folder)
        return []
    found: dict[str, StoreModel] = {}
    folded: set[str] = set()
    for parts in _manifest_paths(manifests):
        name = display_name("/".join(parts[:3]) + ":" + parts[3])
        if name is None:
            continue
        if name.casefold() in folded:
            logger.warning("Ollama's manifest %s is left out: another is named %s too", "/".join(parts), name)
            continue
        folded.add(name.casefold())
        found[name] = read_manifest(name, os.path.join(manifests, *parts), os.path.join(folder, "blobs"))
    logger.info("Ollama's store %s: %d models", folder, len(found))
    return [found[name] for name in sorted(found)]


def _manifest_paths(manifests: str) -> list[tuple[str, ...]]:
    """The ``host/namespace/model/tag`` files under ``manifests``, sorted (Ollama globs ``*/*/*/*``)."""
    paths: list[tuple[str, ...]] = []
    for root, folders, files in os.walk(manifests):
        parts = tuple(os.path.relpath(root, manifests).split(os.sep))
        if len(parts) == 3:
            paths += [(*parts, name) for name in files]
            folders.clear()
    return sorted(paths)


def display_name(text: str) -> str | None:
    """Ollama's shortest display of a model name (``ParseName`` then ``DisplayShortest``): ``lfm2`` ->
    ``lfm2:latest``, ``registry.ollama.ai/library/lfm2:latest`` -> ``lfm2:latest``, ``someone/custom:v1`` as it is;
    None for a name Ollama would not accept."""
    head, tag, namespace, host = text, _DEFAULT_TAG, _DEFAULT_NAMESPACE, _DEFAULT_HOST
    if text.rfind(":") > text.rfind("/"):  # "/" is never part of a tag, ":" may be part of a host
        head, _, tag = text.rpartition(":")
    rest, slash, model = head.rpartition("/")
    if slash:
        rest, slash, namespace = rest.rpartition("/")
        if slash:
            host = rest.partition("://")[2] if "://" in rest else rest
    for value, (pattern, limit) in zip((host, namespace, model, tag), _PARTS, strict=True):
        if not (len(value) <= limit and pattern.fullmatch(value)):
            return None
    if host.casefold() != _DEFAULT_HOST:
        return f"{host}/{namespace}/{model}:{tag}"
    if namespace.casefold() != _DEFAULT_NAMESPACE:
        return f"{namespace}/{model}:{tag}"
    return f"{model}:{tag}"


def read_manifest(name: str, path: str, blobs: str) -> StoreModel:
    """The model one manifest describes; one that cannot be served carries the reason, and what could be read of
    it (its digest, size, details)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
        modified = os.stat(path).st_mtime
    except OSError as exc:
        return StoreModel(
            name, StoreFacts(digest="", size=0, modified=0.0), problem=f"its manifest cannot be read: {exc}"
        )
    facts = StoreFacts(digest=hashlib.sha256(raw).hexdigest(), size=0, modified=modified)
    try:
        try:
            manifest = json.loads(raw)
        except ValueError as exc:
            raise _Unservable(f"its manifest is not valid JSON: {exc}") from None
        if not isinstance(manifest, dict) or not isinstance(manifest.get("layers"), list):
            raise _Unservable("its manifest is not an image manifest: it has no layers")
        layers = [layer for layer in manifest["layers"] if isinstance(layer, dict)]
        config = manifest.get("config")
        config = config if isinstance(config, dict) and config.get("digest") else None
        facts = replace(facts, size=sum(_size(layer) for layer in [*layers, *([config] if config else [])]))
        if config is not None:
            facts = _with_config(facts, _json_blob(blobs, config, "config"))
        return _served(name, layers, facts, blobs)
    except _Unservable as exc:
        return StoreModel(name, facts, problem=str(exc))


def _served(name: str, layers: list[dict[str, Any]], facts: StoreFacts, blobs: str) -> StoreModel:
    """The model of a manifest whose config was read: its blobs checked, its flags, its layers' facts."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for layer in layers:
        kinds.setdefault(str(layer.get("mediaType", "")), []).append(layer)
    if MODEL not in kinds:
        if TENSOR in kinds:
            raise _Unservable(
                "its weights are tensor layers of Ollama's own engine (application/vnd.ollama.image.tensor), "
                "which llama.cpp cannot load"
            )
        raise _Unservable("its manifest has no model layer")
    model = _gguf_blob(blobs, kinds[MODEL][-1], "model")  # Ollama takes the last of each, the first projector
    projector = _gguf_blob(blobs, kinds[PROJECTOR][0], "projector") if PROJECTOR in kinds else None
    adapters = [_gguf_blob(blobs, layer, "adapter") for layer in kinds.get(ADAPTER, [])]
    params = _json_blob(blobs, kinds[PARAMS][-1], "params") if PARAMS in kinds else {}
    if not isinstance(params, dict):
        raise _Unservable("its params layer is not a JSON object")
    system = _blob(blobs, kinds[SYSTEM][-1], "system") if SYSTEM in kinds else None
    messages = _blob(blobs, kinds[MESSAGES][-1], "messages") if MESSAGES in kinds else None
    history = _history(_json_blob(blobs, kinds[MESSAGES][-1], "messages")) if MESSAGES in kinds else ()
    facts = replace(
        facts,
        system=_text(system, "system") if system else "",
        parameters=_parameters_text(params),
        license="\n".join(_text(_blob(blobs, layer, "license"), "license") for layer in kinds.get(LICENSE, [])),
        messages=history,
    )
    argv = ["--model", model, *(["--mmproj", projector] if projector else [])]
    argv += [token for adapter in adapters for token in ("--lora", adapter)]
    argv += _sampling_argv(name, params)
    argv += [
        *(["--system-prompt-file", system] if system else []),
        *(["--chat-messages-file", messages] if messages else []),
    ]
    return StoreModel(
        name, facts, tuple(argv), _load_options(params), model=model, projector=projector, files=(model, *adapters)
    )


def _size(layer: dict[str, Any]) -> int:
    size = layer.get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) else 0


def _blob(blobs: str, layer: dict[str, Any], what: str) -> str:
    """The path of a layer's blob, which must be there; never outside ``blobs`` (only a sha256 digest names one)."""
    digest = str(layer.get("digest", ""))
    match = _DIGEST.fullmatch(digest)
    if match is None:
        raise _Unservable(f"its {what} layer's digest {digest!r} is not a sha256 digest")
    path = os.path.join(blobs, f"sha256-{match[1]}")
    if not os.path.isfile(path):
        raise _Unservable(f"its {what} blob {path} is missing")
    return path


def _gguf_blob(blobs: str, layer: dict[str, Any], what: str) -> str:
    path = _blob(blobs, layer, what)
    try:
        with open(path, "rb") as handle:
            magic = handle.read(len(_GGUF_MAGIC))
    except OSError as exc:
        raise _Unservable(f"its {what} blob {path} cannot be read: {exc}") from None
    if magic != _GGUF_MAGIC:
        raise _Unservable(f"its {what} blob {path} is not a GGUF file")
    return path


def _text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise _Unservable(f"its {what} blob {path} cannot be read as text: {exc}") from None


def _json_blob(blobs: str, layer: dict[str, Any], what: str) -> Any:
    path = _blob(blobs, layer, what)
    try:
        return json.loads(_text(path, what))
    except ValueError as exc:
        raise _Unservable(f"its {what} blob {path} is not valid JSON: {exc}") from None


def _history(value: Any) -> tuple[tuple[str, str], ...]:
    """The messages layer's ``[{"role", "content"}]`` as (role, content) pairs (the child reads the blob itself, by
    the same rule: :func:`lfmserve.chat.preamble.parse_messages`)."""
    if isinstance(value, list) and all(
        isinstance(m, dict) and m.get("role") in _ROLES and isinstance(m.get("content", ""), str) for m in value
    ):
        return tuple((m["role"], m.get("content", "")) for m in value)
    raise _Unservable('its messages layer is not a list of {"role": system|user|assistant|tool, "content": text}')


def _with_config(facts: StoreFacts, config: Any) -> StoreFacts:
    """The details the config blob gives (``model_format``, ``model_family``, ``model_families``, ``model_type``,
    ``file_type``), as Ollama's ``/api/tags`` and ``/api/show`` show them."""
    if not isinstance(config, dict):
        raise _Unservable("its config blob is not a JSON object")

    def text(key: str) -> str:
        value = config.get(key)
        return value if isinstance(value, str) else ""

    families = config.get("model_families")
    return replace(
        facts,
        format=text("model_format"),
        family=text("model_family"),
        families=tuple(f for f in families if isinstance(f, str)) if isinstance(families, list) else (),
        parameter_size=text("model_type"),
        quantization_level=text("file_type"),
    )


def _number(key: str, value: Any, kind: type) -> int | float:
    """A params value as the flag takes it (an int option written as a whole float is read as an int, as Go does)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Unservable(f"its params layer sets {key} to {value!r}, not a number")
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise _Unservable(f"its params layer sets {key} to {value!r}, not a whole number")
        return int(value)
    return float(value)


def _sampling_argv(name: str, params: dict[str, Any]) -> list[str]:
    """The child's sampling flags from the params layer (``stop`` as ``--stop`` strings); the options lfmserve does
    not use (``num_gpu``, ``use_mmap``...) are named once in the log."""
    argv: list[str] = []
    for key, value in params.items():
        if key in _SAMPLING:
            flag, kind = _SAMPLING[key]
            number = _number(key, value, kind)
            if key == "num_predict":
                number = max(int(number), -1)  # -2, Ollama's "fill the context", is "until the end" here
            argv.append(f"{flag}={number}")
    stops = params.get("stop", [])
    stops = [stops] if isinstance(stops, str) else stops
    if not isinstance(stops, list) or not all(isinstance(stop, str) for stop in stops):
        raise _Unservable(f"its params layer's stop is {params.get('stop')!r}, not a list of strings")
    argv += [f"--stop={stop}" for stop in stops]
    unused = sorted(set(params) - set(_SAMPLING) - {"stop", *_LOAD_OPTIONS})
    if unused:
        logger.info("Ollama's %s: its parameters %s are not used by lfmserve", name, ", ".join(unused))
    return argv


def _load_options(params: dict[str, Any]) -> LoadOptions:
    """``num_ctx``, ``num_thread``, ``num_batch`` (0 or less: not set, as Ollama leaves them to the runtime)."""
    values = {key: int(_number(key, params[key], int)) for key in _LOAD_OPTIONS if key in params}
    return LoadOptions(**{key: value for key, value in values.items() if value > 0})


def _parameters_text(params: dict[str, Any]) -> str:
    """``parameters`` as ``ollama show`` writes them: a line per value (each stop string its own), the name padded
    to 30 columns, the value as Go's ``%#v`` writes it."""
    lines = []
    for key in sorted(params):
        values = params[key] if isinstance(params[key], list) else [params[key]]
        lines += [f"{key:<30} {_go_value(value)}" for value in values]
    return "\n".join(lines)


def _go_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
