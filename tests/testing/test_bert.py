"""The BERT-family writer: a bge-small-like embedder and a jina-reranker-like reranker that llama.cpp embeds and
ranks with, tokenizing the suite's English prompts into whole words as the real vocabularies do."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from lfmserve.chat.rerank import rerank_tokens
from lfmserve.llama.embedding import EmbeddingContext
from lfmserve.llama.model import NativeModel
from lfmserve.testing import TinyBert, bge_small_shape, jina_reranker_tiny_shape, write_bert_gguf


@pytest.fixture(scope="module")
def bge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NativeModel]:
    model = NativeModel(write_bert_gguf(tmp_path_factory.mktemp("bert") / "bge.gguf", bge_small_shape(seed=1)))
    yield model
    model.close()


@pytest.fixture(scope="module")
def jina(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NativeModel]:
    path = write_bert_gguf(tmp_path_factory.mktemp("bert") / "jina.gguf", jina_reranker_tiny_shape(seed=1))
    model = NativeModel(path)
    yield model
    model.close()


@pytest.mark.parametrize("shape", [bge_small_shape, jina_reranker_tiny_shape])
def test_the_same_seed_writes_the_same_model(tmp_path: Path, shape: Callable[[int], TinyBert]) -> None:
    paths = [write_bert_gguf(tmp_path / f"{i}.gguf", shape(seed)) for i, seed in enumerate((3, 3, 4))]
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]
    assert digests[0] == digests[1] != digests[2]


@pytest.mark.parametrize(
    ("text", "n_tokens"), [("I believe the meaning of life is", 9), ("This is a test", 6), ("hello hello hello", 5)]
)
def test_bge_tokenizes_words_whole_between_cls_and_sep(bge: NativeModel, text: str, n_tokens: int) -> None:
    tokens = bge.tokenize(text, add_special=True, parse_special=False)
    assert (len(tokens), tokens[0], tokens[-1]) == (n_tokens, 101, 102)
    assert bge.detokenize(tokens) == " " + text.lower()


def test_bge_is_a_bert_with_bge_smalls_width_and_cls_pooling(bge: NativeModel) -> None:
    info = bge.info
    assert (info.architecture, info.vocab_type_name, info.n_embd, info.n_ctx_train) == ("bert", "WPM", 384, 512)
    embedder = EmbeddingContext(bge, pooling=None, n_ubatch=512, n_seq_max=4, n_threads=1)
    try:
        assert embedder.pooling == "cls"
        texts = ["hello world", "goodbye world"]
        vectors = embedder.embed([bge.tokenize(t, add_special=True, parse_special=False) for t in texts])
        assert [v.shape for v in vectors] == [(384,), (384,)]
        assert not np.allclose(vectors[0], vectors[1])
    finally:
        embedder.close()


def test_bge_gives_a_row_per_token_without_pooling(bge: NativeModel) -> None:
    embedder = EmbeddingContext(bge, pooling="none", n_ubatch=512, n_seq_max=4, n_threads=1)
    try:
        (rows,) = embedder.embed([bge.tokenize("hello hello hello", add_special=True, parse_special=False)])
        assert rows.shape == (5, 384)
    finally:
        embedder.close()


def test_jina_pairs_are_roberta_pairs(jina: NativeModel) -> None:
    info = jina.info
    assert (info.architecture, info.vocab_type_name, info.n_ctx_train) == ("jina-bert-v2", "BPE", 8192)
    query = jina.tokenize("Machine learning is", add_special=False, parse_special=False)
    document = jina.tokenize("A machine", add_special=False, parse_special=False)
    assert rerank_tokens(jina, "Machine learning is", "A machine") == [0, *query, 2, 2, *document, 2]


def test_jina_scores_one_value_per_document(jina: NativeModel) -> None:
    documents = ["A machine", "Learning is", "Paris, capitale de la France"]
    ranker = EmbeddingContext(jina, pooling="rank", n_ubatch=512, n_seq_max=4, n_threads=1)
    try:
        assert ranker.width == 1
        scores = [ranker.embed([rerank_tokens(jina, "Machine learning is", d)])[0] for d in documents]
        assert [s.shape for s in scores] == [(1,)] * 3
        assert len({float(s[0]) for s in scores}) == 3
        assert all(-1 < s[0] < 1 for s in scores)  # the head's tanh
    finally:
        ranker.close()
