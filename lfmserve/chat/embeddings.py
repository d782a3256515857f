"""Embedding inputs as the engine takes them: each input's token ids, tokenized as llama-server does.

Strings and token-id arrays are completion prompts (``add_special`` and ``parse_special``; in a mixed
array only the first string gets the special tokens); content parts are their text parts joined without a
separator. Media in embedding inputs (images, audio) are refused for now with a 501 that says so.

Example::

    request = embedding_request(model, ["a cat", [1, 306, 411]], EmbeddingOptions(), default_normalize=2)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..engine.embeddings import EmbeddingRequest, EmbeddingResult, Vector, normalized
from ..errors import InvalidRequest, NotSupported
from ..llama.model import NativeModel
from .prompt_tokens import prompt_tokens
from .request import ContentPrompt, EmbeddingOptions, MediaPrompt, Prompt

EmbeddingInput = Prompt | ContentPrompt


def embedding_request(
    model: NativeModel, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions, *, default_normalize: int
) -> EmbeddingRequest:
    """The engine request for ``inputs``; the engine checks emptiness, sizes and ids."""
    tokens = tuple(tuple(input_tokens(model, item, i)) for i, item in enumerate(inputs))
    return EmbeddingRequest(tokens, default_normalize if options.normalize is None else options.normalize)


def input_tokens(model: NativeModel, item: EmbeddingInput, index: int) -> list[int]:
    if isinstance(item, MediaPrompt) or (
        isinstance(item, ContentPrompt) and any(part.type != "text" for part in item.parts)
    ):
        raise NotSupported("images and audio in embedding inputs are not supported yet", param=f"input.{index}")
    if isinstance(item, ContentPrompt):
        return prompt_tokens(model, "".join(part.text for part in item.parts))
    return prompt_tokens(model, item)


def shaped(result: EmbeddingResult, options: EmbeddingOptions, *, normalize: int, width: int) -> list[Vector]:
    """The vectors cut to OpenAI's ``dimensions`` and normalised again (llama-server ignores the field)."""
    if options.dimensions is None or any(v.ndim != 1 for v in result.vectors):  # pooling none: rows per token
        return result.vectors
    if not 1 <= options.dimensions <= width:
        raise InvalidRequest(f"dimensions must be between 1 and {width} for this model", param="dimensions")
    return [normalized(np.ascontiguousarray(v[: options.dimensions]), normalize) for v in result.vectors]
