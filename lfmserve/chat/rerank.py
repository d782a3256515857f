"""Reranking as llama-server does it: one prompt per (query, document) pair, its score the rank-pooled output.

A prompt is the GGUF's ``rerank`` template with ``{query}`` and ``{document}`` filled in (special text parsed,
no special tokens added), else llama-server's fallback ``[BOS] query [EOS] [SEP] document [EOS]``, each
special token there only when the vocabulary says to add it. A score is the first value of the classifier's
output for the pair's prompt (Qwen3-Reranker: the probability of "yes").

Example::

    request = rerank_request(model, "capital of France", ["Paris is...", "Berlin is..."])
    result = await serving.embeddings.embed(request)
    results = ranked(scores(result), ["Paris is...", "Berlin is..."], tei=False, with_text=False, top_n=2)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..engine.embeddings import EmbeddingRequest, EmbeddingResult
from ..llama.model import NativeModel


def rerank_tokens(model: NativeModel, query: str, document: str) -> list[int]:
    """The prompt whose rank-pooled output scores ``document`` against ``query`` (``format_prompt_rerank``)."""
    info = model.info
    if info.rerank_template is not None:
        prompt = info.rerank_template.replace("{query}", query).replace("{document}", document)
        return model.tokenize(prompt, add_special=False, parse_special=True)
    eos = model.eos_id if model.eos_id >= 0 else model.sep_id
    tokens = [model.bos_id] if info.add_bos else []
    tokens += model.tokenize(query, add_special=False, parse_special=False)
    tokens += [eos] if info.add_eos else []
    tokens += [model.sep_id] if info.add_sep else []
    tokens += model.tokenize(document, add_special=False, parse_special=False)
    tokens += [eos] if info.add_eos else []
    return tokens


def rerank_request(model: NativeModel, query: str, documents: Sequence[str]) -> EmbeddingRequest:
    """The embedding request for every pair: the scores are raw outputs, so nothing is normalised."""
    return EmbeddingRequest(tuple(tuple(rerank_tokens(model, query, d)) for d in documents), normalize=-1)


def scores(result: EmbeddingResult) -> list[float]:
    """Each pair's score: the first output of the classification head."""
    return [float(vector[0]) for vector in result.vectors]


def ranked(
    pair_scores: Sequence[float], documents: Sequence[str], *, tei: bool, with_text: bool, top_n: int
) -> list[dict[str, Any]]:
    """The results best first, cut to ``top_n``: ``relevance_score`` (Jina's name) or ``score`` (TEI's), with
    the document's text if asked (TEI's ``return_text``)."""
    label = "score" if tei else "relevance_score"
    order = sorted(range(len(pair_scores)), key=lambda i: -pair_scores[i])[:top_n]
    results: list[dict[str, Any]] = []
    for index in order:
        item: dict[str, Any] = {"index": index, label: pair_scores[index]}
        if with_text:
            item["text"] = documents[index]
        results.append(item)
    return results
