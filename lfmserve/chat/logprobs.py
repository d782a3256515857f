"""Token log-probabilities in the three shapes clients read them.

- OpenAI chat (``logprobs: true``, ``top_logprobs: N``): ``{"content": [{token, logprob, bytes, top_logprobs}]}``.
- OpenAI legacy completions (``logprobs: N``): parallel lists ``tokens``, ``token_logprobs``,
  ``top_logprobs`` (one ``{token: logprob}`` map per step) and ``text_offset``.
- llama-server's native ``n_probs``: ``completion_probabilities``, entries with ``id`` as well; with
  ``post_sampling_probs``, ``prob`` and ``top_probs`` instead of ``logprob`` and ``top_logprobs``.

The probabilities are the model's (log-softmax of the raw logits), before logit bias, penalties and
grammars, as llama-server reports them, unless the request asked for those after the sampler chain.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ..engine.records import TokenLogprob

PieceFunction = Callable[[int], bytes]


def _entry(
    token: int, logprob: float, piece: PieceFunction, *, with_id: bool, post_sampling: bool = False
) -> dict[str, Any]:
    raw = piece(token)
    out: dict[str, Any] = {"id": token} if with_id else {}
    out["token"] = raw.decode("utf-8", "replace")
    if post_sampling:
        out["prob"] = math.exp(logprob)
    else:
        out["logprob"] = logprob
    out["bytes"] = list(raw)
    return out


def chat_logprobs(steps: Sequence[TokenLogprob], piece: PieceFunction, n_top: int) -> dict[str, Any]:
    return {
        "content": [
            {
                **_entry(step.token, step.logprob, piece, with_id=False),
                "top_logprobs": [_entry(t, lp, piece, with_id=False) for t, lp in step.top[:n_top]],
            }
            for step in steps
        ]
    }


def native_probabilities(
    steps: Sequence[TokenLogprob], piece: PieceFunction, n_top: int, *, post_sampling: bool = False
) -> list[dict[str, Any]]:
    """``completion_probabilities``; ``post_sampling``: the steps hold the sampler chain's probabilities (as
    logarithms), shown as llama-server shows them, as probabilities."""
    top_key = "top_probs" if post_sampling else "top_logprobs"
    return [
        {
            **_entry(step.token, step.logprob, piece, with_id=True, post_sampling=post_sampling),
            top_key: [_entry(t, lp, piece, with_id=True, post_sampling=post_sampling) for t, lp in step.top[:n_top]],
        }
        for step in steps
    ]


def legacy_logprobs(
    steps: Sequence[TokenLogprob], piece: PieceFunction, n_top: int, *, text_offset: int = 0
) -> dict[str, Any]:
    tokens, offsets = [], []
    for step in steps:
        offsets.append(text_offset)
        text = piece(step.token).decode("utf-8", "replace")
        tokens.append(text)
        text_offset += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": [step.logprob for step in steps],
        "top_logprobs": [{piece(t).decode("utf-8", "replace"): lp for t, lp in step.top[:n_top]} for step in steps],
        "text_offset": offsets,
    }
