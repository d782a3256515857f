"""The models a router can serve, found where llama-server's router looks, each with the settings its child
starts from.

Five sources, in llama-server's precedence: the Hugging Face cache that ``-hf`` fills (``org/repo:QUANT``),
``--models-dir`` (a ``.gguf`` file is a model named after it; a sub-folder is a model named after the folder,
with its ``mmproj`` projector and the first part of a split GGUF; a sub-folder with no model of its own holds a
publisher's repo folders, as LM Studio keeps them: :mod:`.lmstudio`), Ollama's store (:mod:`.ollama_store`) and
LM Studio's folder (:mod:`.lmstudio`), where a name another source has keeps that source (so installing either
never changes a router that worked), and ``--models-preset`` (a section whose name is already listed adds its
flags to that model). A model's flags are, from weakest to strongest: what llama.cpp's config files and Ollama's
variables give the router, the preset's ``[*]``, what its source says (``model``/``mmproj``, ``hf-repo``, or an
Ollama model's blobs and params), its own section, and the router's command line and other variables (so
``lfmserve --models-dir d --temp 0`` gives every model ``--temp 0``). An Ollama model's load-time
params (``num_ctx``, ``num_thread``, ``num_batch``) count only where none of the others sets them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import huggingface_hub
from huggingface_hub import constants
from huggingface_hub.errors import CacheNotFound

from ..api.ollama.cards import StoreFacts
from ..errors import LfmError
from ..gguf_split import split_part
from ..loading.hub import cache_dir, pick_gguf, pick_mmproj, quant_tag
from ..settings import RouterSettings, Settings
from ..settings.argv import preset_argv, switch_value
from .lmstudio import scan_publisher, scan_studio, studio_folder
from .ollama_store import LoadOptions, StoreModel, display_name, scan_store, store_folder
from .preset import PresetSection, canonical_name, read_preset

logger = logging.getLogger(__name__)
#: Draft models beside a model in a ``--models-dir`` folder, named as llama-server finds them.
_DRAFT_PREFIXES = ("mtp-", "dspark-", "dflash-")
_DEFAULT_STOP_TIMEOUT_S = 10.0
#: Fields a child never takes from the router's command line: its model and names (secrets are never passed on).
_ROUTER_ONLY = dict(model=None, hf_repo=None, hf_file=None, mmproj=None, alias=None, tags=None)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model of the router: its names, where it was found, and the settings its child is started with
    (``host``, ``port`` and ``alias`` are the router's to set)."""

    name: str
    aliases: tuple[str, ...]
    tags: tuple[str, ...]
    source: str  # "cache" | "models_dir" | "preset", as llama-server reports it; "ollama", "lmstudio" (lfmserve's)
    settings: Settings
    load_on_startup: bool = False
    stop_timeout_s: float = _DEFAULT_STOP_TIMEOUT_S
    ttl_s: float = 0.0
    projector: str | None = None
    files: tuple[str, ...] = ()
    #: A cache entry a preset's model already covers (``dedup-cache-models``): left out of the list, still routable.
    hidden: bool = False
    #: A model of Ollama's store: what its manifest says (its cards show it; its short names find it).
    store: StoreFacts | None = None
    #: Why the model cannot be started (an Ollama manifest whose blob is missing...): listed failed, never started.
    problem: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def memory_files(self) -> tuple[str, ...]:
        """The files its child loads, by which the memory budget counts it: ``files`` and, when it drafts with one
        (``--spec-type draft-simple``; its child loads a ``-md`` file for nothing else), its draft model. The draft
        stays out of ``files``, the model's own (its size in Ollama's lists, its card). A ``-hfd`` draft is left
        out: only its child resolves it to a file."""
        speculation = self.settings.speculation
        draft = speculation.spec_draft_model
        if draft and not speculation.spec_draft_hf and "draft-simple" in (speculation.spec_type or "").split(","):
            return (*self.files, draft)
        return self.files


@dataclass(frozen=True, slots=True)
class _Found:
    source: str
    flags: dict[str, str]
    projector: str | None = None
    files: tuple[str, ...] = ()
    #: An Ollama model: its flags (before ``flags``, which are then its section's) and what its manifest says.
    store: StoreModel | None = None


def build_catalog(settings: Settings) -> dict[str, ModelSpec]:
    """Every model of the router started with ``settings``, by name; LfmError for a preset or folder that cannot
    be read, an option a model's section gets wrong, or two models that share a name."""
    found = {name: _Found("cache", flags, projector, files) for name, flags, projector, files in scan_cache()}
    router = settings.router
    if router.models_dir:
        local = scan_models_dir(router.models_dir)
        found |= {name: _Found("models_dir", flags, projector, files) for name, flags, projector, files in local}
    found |= _store_models(router, {_ollama_key(name): name for name in found})
    studio = _studio_models(router, {_ollama_key(name): name for name in found})
    found |= studio
    everyone, sections = read_preset(router.models_preset) if router.models_preset else (None, [])
    extra: dict[str, PresetSection] = {}
    # A section names an Ollama model whatever the case of its tag (llama-server upper-cases a section's tag).
    store_names = {name.casefold(): name for name, where in found.items() if where.store is not None}
    for section in sections:
        name = section.name if section.name in found else store_names.get(section.name.casefold(), section.name)
        base = found.get(name, _Found("preset", {}))
        found[name] = dataclasses.replace(base, source="preset", flags=base.flags | section.flags)
        extra[name] = section
    inherited = dataclasses.replace(settings, router=RouterSettings()).replace(**_ROUTER_ONLY)
    # What OLLAMA_* variables set is every model's weakest default: under presets and an Ollama model's own params,
    # as Ollama ranks a Modelfile over its variables. So is what llama.cpp's config files set: llama-server's
    # children read them under the flags their presets give.
    from_variables = {name for variable in settings.ollama for name in variable.fields} | set(settings.configured)
    variables_argv = Settings.of(**{name: inherited.value(name) for name in from_variables}).without_secrets().to_argv()
    defaults = Settings()
    base_argv = inherited.replace(**{name: defaults.value(name) for name in from_variables}).without_secrets().to_argv()
    everyone_argv = _argv(everyone.flags, "*") if everyone else []
    specs = []
    for name, where in found.items():
        own = _argv(where.flags, name) + base_argv  # its section's and the router's
        if where.store is None:
            specs.append(_spec(name, where, extra.get(name), variables_argv + everyone_argv + own, router.models_ttl))
        else:
            argv = (variables_argv, everyone_argv, own)
            specs.append(_store_spec(name, where, extra.get(name), argv, router.models_ttl, inherited))
    specs = _without_store_clashes(specs, set(studio))
    _check_names(specs)
    covered = _deduplicated(specs, extra, everyone)
    return {spec.name: dataclasses.replace(spec, hidden=spec.name in covered) for spec in specs}


def _deduplicated(
    specs: list[ModelSpec], sections: dict[str, PresetSection], everyone: PresetSection | None
) -> set[str]:
    """The cache entries hidden by ``dedup-cache-models`` (in a section, or in ``[*]`` for all): those of the repos
    (and quant, when given) that such a preset model or its draft model comes from."""
    default = _truthy(everyone.router.get("dedup-cache-models", "false")) if everyone else False
    sources: list[str] = []
    for spec in specs:
        section = sections.get(spec.name)
        if section is not None and _truthy(section.router.get("dedup-cache-models", str(default))):
            sources += [r for r in (spec.settings.source.hf_repo, spec.settings.speculation.spec_draft_hf) if r]
    hidden = set()
    for spec in specs:
        if spec.source == "cache":
            repo = spec.name.partition(":")[0]
            if any(source == repo or canonical_name(source) == spec.name for source in sources):
                hidden.add(spec.name)
    return hidden


def _argv(flags: dict[str, str], section: str) -> list[str]:
    try:
        return preset_argv(flags)
    except KeyError as exc:
        raise LfmError(f"option '{exc.args[0]}' not recognized in preset '{section}'") from exc
    except ValueError as exc:
        raise LfmError(f"preset '{section}': {exc}") from exc


def _spec(name: str, where: _Found, section: PresetSection | None, argv: list[str], ttl_s: float) -> ModelSpec:
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            # The flags alone: the router's environment reached them through its own settings, and a key a
            # section names is dropped, as llama-server's router drops it (a child accepts only its own).
            settings = Settings.from_argv(argv, environ={}).without_secrets()
    except SystemExit as exc:
        message = errors.getvalue().strip().removeprefix("lfmserve: error: ")
        raise LfmError(f"model '{name}': {message}") from exc
    router_keys = section.router if section else {}
    projector = settings.source.mmproj or (where.projector if settings.source.mmproj_auto else None)
    files = where.files or tuple(path for path in (settings.source.model,) if path)
    return ModelSpec(
        name=name,
        aliases=tuple(a for a in settings.source.aliases if a != name),
        tags=settings.source.tag_list,
        source=where.source,
        settings=settings,
        load_on_startup=_truthy(router_keys.get("load-on-startup", "false")),
        stop_timeout_s=float(router_keys.get("stop-timeout", _DEFAULT_STOP_TIMEOUT_S)),
        ttl_s=float(router_keys.get("ttl", ttl_s)),
        projector=projector,
        files=files + ((projector,) if projector and projector not in files else ()),
    )


def _ollama_key(name: str) -> str:
    """What a name stands for in Ollama's terms (``text`` and ``text:latest`` are one name there), case folded."""
    return (display_name(name) or name).casefold()


def _store_models(router: RouterSettings, taken: dict[str, str]) -> dict[str, _Found]:
    """The models of Ollama's store, except those another source's model is named as (``taken``, by
    :func:`_ollama_key`): each is skipped with a warning, and the other source keeps the name."""
    folder = store_folder(router)
    out = {}
    for model in scan_store(folder) if folder else []:
        other = taken.get(_ollama_key(model.name))
        if other is not None:
            logger.warning("Ollama's model %s is left out: the router already has a model named %s", model.name, other)
            continue
        out[model.name] = _Found("ollama", {}, model.projector, model.files, store=model)
    return out


def _studio_models(router: RouterSettings, taken: dict[str, str]) -> dict[str, _Found]:
    """The models of LM Studio's folder, except those another source's model is named as (``taken``, by
    :func:`_ollama_key`): each is skipped with a warning. A folder that is ``--models-dir`` too is read as that."""
    folder = studio_folder(router)
    if folder is None or (router.models_dir and _same_folder(folder, router.models_dir)):
        return {}
    out = {}
    for model in scan_studio(folder):
        other = taken.get(_ollama_key(model.name))
        if other is not None:
            logger.warning(
                "LM Studio's model %s is left out: the router already has a model named %s", model.name, other
            )
            continue
        out[model.name] = _Found("lmstudio", model.flags, model.projector, model.files)
    return out


def _same_folder(one: str, other: str) -> bool:
    return os.path.realpath(os.path.expanduser(one)) == os.path.realpath(os.path.expanduser(other))


def _store_spec(
    name: str,
    where: _Found,
    section: PresetSection | None,
    argv: tuple[list[str], list[str], list[str]],
    ttl_s: float,
    inherited: Settings,
) -> ModelSpec:
    """An Ollama model: its blobs' flags between the OLLAMA_* variables' and ``[*]``'s, and its section's and the
    router's (``argv``), then its load-time params where none but the variables sets them. A model whose manifest
    or flags cannot be served is listed failed with the reason, never stopping the router."""
    store = where.store
    assert store is not None
    variables, everyone, own = argv
    problem = store.problem
    if problem is None:
        try:
            spec = _spec(name, where, section, [*variables, *everyone, *store.argv, *own], ttl_s)
            settings = _with_load_options(spec.settings, store.load, given=everyone + own)
            return dataclasses.replace(spec, settings=settings, store=store.facts)
        except LfmError as exc:
            problem = str(exc)
    settings = inherited.replace(model=store.model) if store.model else inherited
    return ModelSpec(
        name=name, aliases=(), tags=(), source=where.source, settings=settings, store=store.facts, problem=problem
    )


def _with_load_options(settings: Settings, load: LoadOptions, given: list[str]) -> Settings:
    """Ollama's load-time params, each where no flag of ``given`` sets it: ``num_ctx`` is a request's context (the
    whole is that times ``--parallel``, as Ollama starts llama-server), ``num_batch`` both batch sizes."""
    flags = {token.partition("=")[0] for token in given if token.startswith("--")}
    values: dict[str, int] = {}
    if load.num_ctx is not None and "--ctx-size" not in flags:
        values["ctx_size"] = load.num_ctx * settings.engine.parallel
    if load.num_thread is not None and "--threads" not in flags:
        values["threads"] = load.num_thread
    if load.num_batch is not None and not flags & {"--batch-size", "--ubatch-size"}:
        values |= {"batch_size": load.num_batch, "ubatch_size": load.num_batch}
    return settings.replace(**values)


def _without_store_clashes(specs: list[ModelSpec], studio: set[str]) -> list[ModelSpec]:
    """Leave out the Ollama models named as a preset's model or another model's alias is, then the LM Studio models
    (``studio``, by name) named as any model left is, each with a warning (the other keeps the name)."""
    specs = _without_clashes(specs, "Ollama's", lambda spec: spec.store is not None, ignored=studio)
    return _without_clashes(specs, "LM Studio's", lambda spec: spec.name in studio, ignored=set())


def _without_clashes(
    specs: list[ModelSpec], label: str, weak: Callable[[ModelSpec], bool], ignored: set[str]
) -> list[ModelSpec]:
    """``specs`` less the ``weak`` ones named (in Ollama's terms) as a name or alias of a model neither weak nor
    ``ignored`` is."""
    others = {
        _ollama_key(name): name for spec in specs if not weak(spec) and spec.name not in ignored for name in spec.names
    }
    kept = []
    for spec in specs:
        other = others.get(_ollama_key(spec.name)) if weak(spec) else None
        if other is not None:
            logger.warning("%s model %s is left out: the router already has a model named %s", label, spec.name, other)
        else:
            kept.append(spec)
    return kept


def _truthy(value: str) -> bool:
    return switch_value(value) is True


def _check_names(specs: Iterable[ModelSpec]) -> None:
    """No name or alias is used by two models (llama-server refuses to start with such a list)."""
    owner: dict[str, str] = {}
    for spec in specs:
        for name in spec.names:
            if name in owner:
                raise LfmError(f"alias '{name}' for model '{spec.name}' conflicts with model '{owner[name]}'")
            owner[name] = spec.name


def scan_models_dir(folder: str) -> list[tuple[str, dict[str, str], str | None, tuple[str, ...]]]:
    """``--models-dir``'s models as llama-server finds them, and the ``<publisher>/<repo>`` folders of LM Studio's
    layout: name, flags, projector, weight files."""
    if not os.path.isdir(folder):
        raise LfmError(f"--models-dir {folder} does not exist or is not a folder")
    out = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.is_dir():
            found = _scan_model_folder(entry.path)
            if found is not None:
                out.append((entry.name, *found))
            elif not entry.name.startswith("."):  # a publisher's folder of repos, as LM Studio keeps them
                out += [(m.name, m.flags, m.projector, m.files) for m in scan_publisher(entry.path, entry.name)]
        elif entry.name.endswith(".gguf") and not _is_companion(entry.name):
            out.append((entry.name.replace(".gguf", ""), {"model": entry.path}, None, (entry.path,)))
    return out


def _is_projector(name: str) -> bool:
    return "mmproj" in name


def _is_draft(name: str) -> bool:
    return name.startswith(_DRAFT_PREFIXES)


def _is_companion(name: str) -> bool:
    """A projector or a draft model sitting beside the models, not a model of its own."""
    return _is_projector(name) or _is_draft(name)


def _scan_model_folder(path: str) -> tuple[dict[str, str], str | None, tuple[str, ...]] | None:
    model = projector = draft = first = None  # first: a split model's first part
    shards: list[str] = []
    for name in sorted(os.listdir(path)):
        if not name.endswith(".gguf"):
            continue
        full = os.path.join(path, name)
        if _is_projector(name):
            projector = full
        elif _is_draft(name):
            draft = draft or full
        elif (part := split_part(name)) is not None:
            shards.append(full)
            if part.number == 1:
                first = first or full
        else:
            model = full
    model = first or model
    if model is None:
        return None
    flags = {"model": model}
    if projector:
        flags["mmproj"] = projector
    if draft:
        flags["spec-draft-model"] = draft
    return flags, projector, tuple(shards) if first else (model,)


def scan_cache() -> list[tuple[str, dict[str, str], str | None, tuple[str, ...]]]:
    """The GGUF models in the Hugging Face cache, one per repo and quant (``org/repo:Q4_K_M``); they start with
    ``--offline``, since their files are already there.

    No cache folder yet means no cache models. A cache that cannot be read (a file in its place, no permission)
    lists none, and a repo folder huggingface_hub finds broken is left out; each is named in a warning, so a list
    that lacks them says why.
    """
    folder = cache_dir() or constants.HF_HUB_CACHE
    try:
        cache = huggingface_hub.scan_cache_dir(folder)
    except CacheNotFound:
        return []
    except (OSError, ValueError) as exc:  # ValueError: a file where the folder should be
        logger.warning("the Hugging Face cache %s cannot be read, so none of its models are listed: %s", folder, exc)
        return []
    for broken in cache.warnings:
        logger.warning("a Hugging Face cache folder is left out of the models: %s", broken)
    out = []
    for repo in sorted(cache.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model" or not repo.revisions:
            continue
        revision = max(repo.revisions, key=lambda r: r.last_modified)
        files = {str(f.file_path.relative_to(revision.snapshot_path)): str(f.file_path) for f in revision.files}
        for tag in sorted({quant_tag(name) for name in files if name.endswith(".gguf") and "mmproj" not in name}):
            name = canonical_name(f"{repo.repo_id}:{tag}") if tag else repo.repo_id
            try:
                parts = pick_gguf(files, tag) if tag else []
            except LfmError:
                continue
            projector = pick_mmproj(files, parts[0]) if parts else None
            weights = tuple(files[p] for p in parts)
            out.append((name, {"hf-repo": name, "offline": "true"}, files[projector] if projector else None, weights))
    return out
