"""Embedding inputs as the engine takes them: each input's token ids, tokenized as llama-server does.

Strings and token-id arrays are completion prompts (``add_special`` and ``parse_special``; in a mixed
array only the first string gets the special tokens); content parts are their text parts joined without a
separator, each media part the media marker; ``{"prompt_string", "multimodal_data"}`` holds its markers.
An input with media is tokenized by the projector into chunks, as a chat prompt with media is.

Example::

    media = await reader.read_all(embedding_sources(inputs))
    request = embedding_request(model, projector, inputs, media, EmbeddingOptions(), default_normalize=2)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..engine.embeddings import EmbeddingRequest, EmbeddingResult, Vector, normalized
from ..engine.media import prompt_from_chunks
from ..engine.records import MediaSpan
from ..errors import InvalidRequest
from ..llama.model import NativeModel
from ..llama.mtmd import Media, Projector
from .media import MediaSource
from .prompt_tokens import prompt_tokens
from .request import ContentPrompt, EmbeddingOptions, MediaPrompt, Prompt

EmbeddingInput = Prompt | ContentPrompt


def embedding_sources(inputs: Sequence[EmbeddingInput]) -> list[list[MediaSource]]:
    """Each input's media, as the media reader takes them (none for text and token inputs)."""
    sources: list[list[MediaSource]] = []
    for i, item in enumerate(inputs):
        if isinstance(item, ContentPrompt):
            parts = enumerate(item.parts)
            sources.append([(p.type, p.source, f"input.{i}.content.{j}") for j, p in parts if p.type != "text"])
        elif isinstance(item, MediaPrompt):
            sources.append([(None, source, f"input.{i}.multimodal_data.{j}") for j, source in enumerate(item.sources)])
        else:
            sources.append([])
    return sources


def embedding_request(
    model: NativeModel,
    projector: Projector | None,
    inputs: Sequence[EmbeddingInput],
    media: Sequence[Sequence[Media]],
    options: EmbeddingOptions,
    *,
    default_normalize: int,
) -> EmbeddingRequest:
    """The engine request for ``inputs`` and their decoded ``media``; the engine checks emptiness, sizes and ids."""
    tokens: list[tuple[int, ...]] = []
    spans: list[tuple[MediaSpan, ...]] = []
    for i, item in enumerate(inputs):
        items = media[i] if i < len(media) else ()
        if items and projector is not None:
            text = _text(item, projector.marker)
            try:
                chunks = projector.tokenize(text, items, add_special=True, parse_special=True)
            except ValueError as exc:  # markers and media differ in number
                raise InvalidRequest(str(exc), param=f"input.{i}") from None
            ids, found = prompt_from_chunks(chunks)
            tokens.append(ids)
            spans.append(found)
        else:
            plain = _text(item, "") if isinstance(item, ContentPrompt | MediaPrompt) else item
            tokens.append(tuple(prompt_tokens(model, plain)))
            spans.append(())
    normalize = default_normalize if options.normalize is None else options.normalize
    return EmbeddingRequest(tuple(tokens), normalize, tuple(spans) if any(spans) else ())


def _text(item: EmbeddingInput, marker: str) -> str:
    """An input's text with a marker per media item (content parts joined without a separator)."""
    if isinstance(item, ContentPrompt):
        return "".join(part.text if part.type == "text" else marker for part in item.parts)
    if isinstance(item, MediaPrompt):
        return item.text
    raise TypeError("only content parts and media prompts hold media")


def check_dimensions(options: EmbeddingOptions, width: int) -> None:
    """OpenAI's ``dimensions`` must fit the vectors (checked before anything is embedded)."""
    if options.dimensions is not None and not 1 <= options.dimensions <= width:
        raise InvalidRequest(f"dimensions must be between 1 and {width} for this model", param="dimensions")


def shaped(result: EmbeddingResult, options: EmbeddingOptions, *, normalize: int) -> list[Vector]:
    """The vectors cut to OpenAI's ``dimensions`` and normalised again (llama-server ignores the field)."""
    if options.dimensions is None or any(v.ndim != 1 for v in result.vectors):  # pooling none: rows per token
        return result.vectors
    return [normalized(np.ascontiguousarray(v[: options.dimensions]), normalize) for v in result.vectors]
