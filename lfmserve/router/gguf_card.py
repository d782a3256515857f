"""A router model's Ollama card, read from its GGUF files, so that ``/api/tags`` and ``/api/show`` describe a
model that is not loaded (as Ollama does) without starting its child.

The chat template is the file's own (or ``--chat-template-file``'s): its ``tools`` and ``thinking`` are found
by the same probes a loaded model's template gets. The context is the one a request may use once loaded:
``--ctx-size`` shared by ``--parallel`` slots when the model's settings give one, else the model's trained
context.
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
    weights = [path for path in spec.files if path != spec.projector] or [settings.source.model or ""]
    header = _header(weights[0], _stamp(weights[0]))
    template = _template_text(settings.chat.chat_template_file) or header.chat_template
    tools, thinking = template_capabilities(template, header.bos_token, header.eos_token)
    modalities = input_modalities(spec.projector)
    slots = max(settings.engine.parallel, 1)
    context = settings.engine.ctx_size // slots if settings.engine.ctx_size > 0 else header.context_length
    size, modified = files_size_and_time(spec.files)
    return ModelCard(
        name=ollama_name(spec.name),
        size=size,
        modified=modified,
        architecture=header.architecture,
        basename=header.basename,
        parameter_count=header.parameter_count,
        size_label=header.size_label,
        file_type=header.file_type,
        context_length=context,
        embedding_length=header.embedding_length,
        template=template,
        capabilities=capabilities(
            tools=tools,
            thinking=thinking,
            vision="image" in modalities,
            audio="audio" in modalities,
            embedding=settings.embedding.embeddings,
        ),
    )


def _stamp(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


@functools.lru_cache(maxsize=64)
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
