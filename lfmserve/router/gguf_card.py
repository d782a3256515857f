"""A router model's Ollama card and the ``meta`` of its ``/v1/models`` entry, read from its GGUF files, so that
``/api/tags``, ``/api/show`` and ``/v1/models`` describe a model that is not loaded (as Ollama does) without
starting its child.

The chat template is the file's own (or ``--chat-template-file``'s): its ``tools`` and ``thinking`` are found
by the same probes a loaded model's template gets. The context is the one a request will have once the model
loads, by the rule its child applies (:func:`~lfmserve.loading.engine_config.slot_context`): a client that sizes
its prompts from the list before any load (Frigate) gets the number ``/props?model=`` reports after. A header is
parsed once per file version; callers read it off the event loop.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf import GGUFReader, GGUFValueType

from ..api.ollama.cards import ModelCard, capabilities, files_size_and_time, ollama_name, template_capabilities
from ..loading.engine_config import slot_context
from .catalog import ModelSpec
from .modalities import input_modalities

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Header:
    """What a model's GGUF header says, for its card."""

    architecture: str = "unknown"
    basename: str | None = None
    size_label: str | None = None
    file_type: int = -1
    parameter_count: int = 0
    context_length: int = 0
    embedding_length: int = 0
    chat_template: str = ""
    bos_token: str = ""
    eos_token: str = ""


def model_card(spec: ModelSpec) -> ModelCard:
    settings = spec.settings
    header = _weights_header(spec)
    template = _template_text(settings.chat.chat_template_file) or header.chat_template
    tools, thinking = template_capabilities(template, header.bos_token, header.eos_token)
    modalities = input_modalities(spec.projector)
    size, modified = (spec.store.size, spec.store.modified) if spec.store else files_size_and_time(spec.files)
    return ModelCard(
        name=ollama_name(spec.name),
        size=size,
        modified=modified,
        architecture=header.architecture,
        basename=header.basename,
        parameter_count=header.parameter_count,
        size_label=header.size_label,
        file_type=header.file_type,
        context_length=slot_context(settings, header.context_length),
        embedding_length=header.embedding_length,
        template=template,
        capabilities=capabilities(
            tools=tools,
            thinking=thinking,
            vision="image" in modalities,
            audio="audio" in modalities,
            embedding=settings.embedding.embeddings,
        ),
        store=spec.store,
    )


def listed_meta(spec: ModelSpec) -> dict[str, int] | None:
    """``meta`` of a model no child describes yet: the context a request will have once it loads, and the one it
    was trained on; None while its file cannot be read (a download to come), whose context nothing tells."""
    header = _weights_header(spec)
    if not header.context_length:
        return None
    return {"n_ctx": slot_context(spec.settings, header.context_length), "n_ctx_train": header.context_length}


def _weights_header(spec: ModelSpec) -> _Header:
    """The header of the model's (first) weights file; an empty one while it has none (a preset's ``hf-repo``,
    downloaded by its child) or cannot be started (an Ollama manifest whose blob is missing or no GGUF)."""
    if spec.problem is not None:
        return _Header()
    weights = [path for path in spec.files if path != spec.projector] or [spec.settings.source.model or ""]
    return _header(weights[0], _stamp(weights[0])) if weights[0] else _Header()


def _stamp(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


@functools.cache  # one entry per file version: a router listing many models reads each header once
def _header(path: str, stamp: int) -> _Header:  # noqa: ARG001 - the stamp keys the cache
    try:
        reader = GGUFReader(path)
    except Exception as exc:  # not there yet (a download to come), truncated, not a GGUF: an empty card
        logger.warning("cannot read the model %s: %s", path, exc)
        return _Header()

    def value(key: str, default: Any = None) -> Any:
        field = reader.fields.get(key)
        if field is None or not field.types or field.types[0] == GGUFValueType.ARRAY:
            return default
        if field.types[0] == GGUFValueType.STRING:
            return bytes(field.parts[field.data[0]]).decode("utf-8", "replace")
        return field.parts[field.data[0]][0].item()

    def token(key: str) -> str:
        index, tokens = value(key), reader.fields.get("tokenizer.ggml.tokens")
        if not isinstance(index, int) or tokens is None or not 0 <= index < len(tokens.data):
            return ""
        return bytes(tokens.parts[tokens.data[index]]).decode("utf-8", "replace")

    arch = str(value("general.architecture", "unknown"))
    count = value("general.parameter_count") or sum(int(tensor.n_elements) for tensor in reader.tensors)
    return _Header(
        architecture=arch,
        basename=value("general.basename") or value("general.name"),
        size_label=value("general.size_label"),
        file_type=int(value("general.file_type", -1)),
        parameter_count=int(count),
        context_length=int(value(f"{arch}.context_length", 0)),
        embedding_length=int(value(f"{arch}.embedding_length", 0)),
        chat_template=str(value("tokenizer.chat_template", "")),
        bos_token=token("tokenizer.ggml.bos_token_id"),
        eos_token=token("tokenizer.ggml.eos_token_id"),
    )


def _template_text(path: str | None) -> str:
    if not path:
        return ""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError:
        return ""
