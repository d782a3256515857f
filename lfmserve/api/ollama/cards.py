"""What Ollama's clients read about a model (``/api/tags``, ``/api/show``, ``/api/ps``), from one neutral card.

A single-model server makes the card from its loaded model, the router from the GGUF files of a model that
may not be loaded; both answer in the same shapes. Names follow Ollama's ``name:tag``: a name without a tag is
shown as ``name:latest``, and a request may use either form, or any alias.

``/api/show`` is honest, which is what Copilot and Frigate decide by: ``capabilities`` are the ones the model
has (``tools`` and ``thinking`` as its chat template reacts to them, ``vision`` and ``audio`` as its projector
reads them, ``embedding`` when the server embeds), and ``model_info`` has ``general.architecture`` and
``<arch>.context_length`` (the context one request may use).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ...chat.template import ChatFormatter, ChatTemplate
from ...errors import TemplateError

#: The Ollama version lfmserve answers to (``/api/version``): Copilot needs 0.6.4 or later.
OLLAMA_VERSION = "0.12.6"
#: How far ``expires_at`` lies for a model kept "for ever" (Ollama's is as far off).
_FOREVER = timedelta(days=365 * 200)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreFacts:
    """What Ollama's store says of a model it holds, shown as Ollama shows it: the manifest's digest (the sha256 of
    its file), size (its layers' and config's) and time; the config blob's details; the model's system, params,
    license and messages layers (``parameters`` in ``ollama show``'s form)."""

    digest: str
    size: int
    modified: float
    format: str = ""
    family: str = ""
    families: tuple[str, ...] = ()
    parameter_size: str = ""
    quantization_level: str = ""
    system: str = ""
    parameters: str = ""
    license: str = ""
    messages: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCard:
    name: str
    #: Bytes of the model's files (weights, projector).
    size: int
    modified: float
    architecture: str
    basename: str | None
    parameter_count: int
    #: ``general.size_label`` (``1.2B``), if the file has one.
    size_label: str | None
    #: ``general.file_type`` (llama.cpp's ftype), -1 when the file does not say.
    file_type: int
    context_length: int
    embedding_length: int
    template: str
    capabilities: tuple[str, ...]
    #: A model of Ollama's store: its manifest and config blob decide the digest, size, time and details.
    store: StoreFacts | None = None

    @property
    def quantization(self) -> str:
        from gguf import LlamaFileType  # here: only Ollama's model routes need it, and gguf costs megabytes

        try:
            return LlamaFileType(self.file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            return "unknown"

    @property
    def parameter_size(self) -> str:
        if self.size_label:
            return self.size_label
        count = self.parameter_count
        return f"{count / 1e9:.1f}B" if count >= 1e9 else f"{count / 1e6:.0f}M"


def capabilities(*, tools: bool, thinking: bool, vision: bool, audio: bool, embedding: bool) -> tuple[str, ...]:
    """Ollama's capability names, in its order (``completion`` always: every model here generates)."""
    flags = (("tools", tools), ("thinking", thinking), ("vision", vision), ("audio", audio), ("embedding", embedding))
    return ("completion", *(name for name, present in flags if present))


def thinks(template: ChatFormatter) -> bool:
    """Whether the model thinks: its template reacts to ``enable_thinking`` or writes ``<think>`` blocks."""
    return template.supports_thinking or template.think_tags is not None


@functools.lru_cache(maxsize=64)
def template_capabilities(source: str, bos_token: str, eos_token: str) -> tuple[bool, bool]:
    """Whether a chat template (from a model's file, not loaded) takes tools, and whether its model thinks."""
    if not source:
        return False, False
    try:
        template = ChatTemplate(source, bos_token=bos_token, eos_token=eos_token)
    except TemplateError:
        return False, False
    return template.caps.supports_tools, thinks(template)


def ollama_name(name: str) -> str:
    """``name:tag``; a name without a tag is ``:latest`` (a colon inside a path does not count as a tag)."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def name_forms(requested: str) -> list[str]:
    """The names a request's model may stand for: as given, and with ``:latest`` taken off or put on."""
    forms = [requested]
    if requested.endswith(":latest"):
        forms.append(requested.removesuffix(":latest"))
    elif ollama_name(requested) != requested:
        forms.append(ollama_name(requested))
    return forms


def matches(requested: str, names: Iterable[str]) -> bool:
    """Whether the request's model names one of ``names`` (a model's name and aliases)."""
    known = {form for name in names for form in name_forms(name)}
    return any(form in known for form in name_forms(requested))


def files_size_and_time(paths: Iterable[str]) -> tuple[int, float]:
    """The files' bytes together and the latest change among them (files not there count as empty and unchanged)."""
    size, modified = 0, 0.0
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            continue
        size, modified = size + stat.st_size, max(modified, stat.st_mtime)
    return size, modified


def digest(card: ModelCard) -> str:
    """A stable id of the model's files: Ollama's manifest's hash for a model of its store, else a hash of the name,
    size and change time."""
    if card.store is not None:
        return card.store.digest
    return hashlib.sha256(f"{card.name}\0{card.size}\0{card.modified}".encode()).hexdigest()


def timestamp(seconds: float) -> str:
    """RFC 3339 in UTC with fractional seconds, as Ollama writes times (every line of a stream has one: the date
    part is formatted once a second)."""
    whole = int(seconds)
    return f"{_date_and_time(whole)}.{int((seconds - whole) * 1e6):06d}Z"


@functools.lru_cache(maxsize=4)
def _date_and_time(whole_seconds: int) -> str:
    return datetime.fromtimestamp(whole_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def details(card: ModelCard) -> dict[str, Any]:
    """Ollama's ``details``: a store model's from its config blob (what it leaves out read from the GGUF)."""
    store = card.store or StoreFacts(digest="", size=0, modified=0.0)
    return {
        "parent_model": "",
        "format": store.format or "gguf",
        "family": store.family or card.architecture,
        "families": list(store.families or (store.family or card.architecture,)),
        "parameter_size": store.parameter_size or card.parameter_size,
        "quantization_level": store.quantization_level or card.quantization,
    }


def tags_entry(card: ModelCard) -> dict[str, Any]:
    """One model of ``/api/tags`` (Zed requires every field of it)."""
    return {
        "name": card.name,
        "model": card.name,
        "modified_at": timestamp(card.modified),
        "size": card.size,
        "digest": digest(card),
        "details": details(card),
    }


def show(card: ModelCard) -> dict[str, Any]:
    """``/api/show``."""
    arch = card.architecture
    info: dict[str, Any] = {
        "general.architecture": arch,
        "general.basename": card.basename or card.name.split(":")[0],
        "general.parameter_count": card.parameter_count,
        "general.file_type": card.file_type,
        f"{arch}.context_length": card.context_length,
        f"{arch}.embedding_length": card.embedding_length,
    }
    shown = {
        "modelfile": "",
        "parameters": "",
        "template": card.template,
        "details": details(card),
        "model_info": info,
        "capabilities": list(card.capabilities),
        "modified_at": timestamp(card.modified),
    }
    store = card.store
    if store is not None:  # what Ollama shows of its layers, each left out when the model has none
        layers: dict[str, Any] = {"system": store.system, "license": store.license, "parameters": store.parameters}
        layers["messages"] = [{"role": role, "content": content} for role, content in store.messages]
        shown |= {key: value for key, value in layers.items() if value}
    return shown


def ps_entry(card: ModelCard, *, now: float, keep_s: float) -> dict[str, Any]:
    """One loaded model of ``/api/ps``: it expires ``keep_s`` from ``now`` (negative: never). A time-to-live past the
    "for ever" horizon (``--models-ttl 1000000000000``) is shown as for ever: no date could be written for it."""
    horizon_s = _FOREVER.total_seconds()
    kept_s = horizon_s if keep_s < 0 else min(keep_s, horizon_s)
    expires = datetime.fromtimestamp(now, UTC) + timedelta(seconds=kept_s)
    return {
        **{key: value for key, value in tags_entry(card).items() if key != "modified_at"},
        "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "size_vram": 0,
        "context_length": card.context_length,
    }
