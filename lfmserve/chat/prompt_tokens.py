"""A completion or embedding prompt's token ids, tokenized as llama-server's ``tokenize_mixed`` does."""

from __future__ import annotations

from collections.abc import Sequence

from ..llama.model import NativeModel


def prompt_tokens(model: NativeModel, prompt: str | Sequence[int | str]) -> list[int]:
    """Text (with the model's special tokens, special text parsed), token ids, or a mix of both, where only
    a leading string gets the special tokens."""
    if isinstance(prompt, str):
        return model.tokenize(prompt, add_special=True, parse_special=True)
    tokens: list[int] = []
    for i, piece in enumerate(prompt):
        if isinstance(piece, int):
            tokens.append(piece)
        else:
            tokens += model.tokenize(piece, add_special=i == 0, parse_special=True)
    return tokens
