"""Tiny random-weight BERT-family GGUFs: an embedding model shaped like bge-small (``bert``) and a reranker shaped
like jina-reranker-v1-tiny-en (``jina-bert-v2``), for ``/v1/embeddings`` and ``/rerank``.

llama.cpp loads them as the real checkpoints' GGUFs: the keys and tensors are the ones its ``bert`` and
``jina-bert-v2`` loaders read (src/models/bert.cpp, jina-bert-v2.cpp; a tensor they do not read is an error).
The ``bert`` vocabulary is WordPiece in llama.cpp's phantom-space form (``▁word`` starts a word, a bare piece
continues one) with BERT's special tokens at their real ids; every lower-case letter, digit and punctuation
mark is a piece, so any ASCII text tokenizes without ``[UNK]``. The ``jina-bert-v2`` vocabulary is byte-level
BPE with RoBERTa's special tokens (``<s> query </s></s> document </s>`` to rank), as the real reranker's.

Example::

    path = write_bert_gguf(tmp_path / "bge.gguf", bge_small_shape(seed=1))
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import gguf
import numpy as np

from .lfm2 import finish_gguf
from .vocab import SPM_SPACE, byte_alphabet, byte_level_words, learn_merges, wordpiece_words

#: BERT's special tokens at their ids in bert-base-uncased (and so bge-small); ids 1-99 are ``[unused]``.
BERT_SPECIAL_IDS: dict[str, int] = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}
#: RoBERTa's special tokens at their ids (jina-reranker-v1-tiny-en's vocabulary), ``<mask>`` last.
ROBERTA_SPECIAL_IDS: dict[str, int] = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
_POOLING = {"mean": gguf.PoolingType.MEAN, "cls": gguf.PoolingType.CLS, "last": gguf.PoolingType.LAST}


@dataclass(frozen=True, slots=True, kw_only=True)
class TinyBert:
    """Shape and identity of a random BERT-family model; the defaults make a ~4.7 MB bge-small-like file."""

    seed: int = 0
    #: ``bert``: WordPiece, learnt positions, a GELU feed-forward. ``jina-bert-v2``: byte-level BPE, ALiBi (no
    #: position table), a GEGLU feed-forward and a one-score classification head (``cls``), as rerankers have.
    arch: Literal["bert", "jina-bert-v2"] = "bert"
    #: bge-small's and jina-reranker-v1-tiny-en's width, so embeddings have the real length.
    n_embd: int = 384
    n_ff: int = 384
    n_head: int = 12
    n_layer: int = 2
    context_length: int = 512
    #: ``bert.pooling_type`` (bge-small's GGUF says ``cls``); None writes none, as a reranker's GGUF.
    pooling: Literal["mean", "cls", "last"] | None = "cls"
    name: str = "Tiny-BERT-Test"
    weight_scale: float = 1.0


def bge_small_shape(seed: int = 0) -> TinyBert:
    """bge-small-en's width, heads, context and CLS pooling, with 2 layers (it has 12) and a narrower
    feed-forward (384 wide; it has 1536)."""
    return TinyBert(seed=seed, name="BGE-Small-Stand-In")


def jina_reranker_tiny_shape(seed: int = 0) -> TinyBert:
    """jina-reranker-v1-tiny-en's width and heads with 2 layers (it has 4); ALiBi, so its context is long."""
    return TinyBert(
        seed=seed, arch="jina-bert-v2", pooling=None, context_length=8192, name="Jina-Reranker-Tiny-Stand-In"
    )


def write_bert_gguf(path: str | Path, spec: TinyBert | None = None) -> Path:
    """Write a random-weight BERT-family GGUF to ``path`` and return the path."""
    spec = spec or TinyBert()
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), spec.arch)
    n_vocab = _write_wordpiece(writer) if spec.arch == "bert" else _write_byte_level_bpe(writer)
    writer.add_token_type_count(2)  # "sentence A" and "sentence B", as both real models have
    writer.add_name(spec.name)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_layer_norm_eps(1e-12)
    writer.add_causal_attention(False)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if spec.pooling:
        writer.add_pooling_type(_POOLING[spec.pooling])
    _write_tensors(writer, spec, n_vocab)
    return finish_gguf(writer, path)


def _write_wordpiece(writer: gguf.GGUFWriter) -> int:
    """bert-base-uncased's layout: specials and ``[unused]`` below 104, then characters, then whole words."""
    by_id = {i: text for text, i in BERT_SPECIAL_IDS.items()}
    tokens = [by_id.get(i, f"[unused{i - 1}]") for i in range(104)]
    types = [gguf.TokenType.CONTROL] * len(tokens)
    pieces = [SPM_SPACE + c for c in string.ascii_lowercase + string.digits + string.punctuation]
    pieces += list(string.ascii_lowercase + string.digits)  # a word's next character
    pieces += [SPM_SPACE + w for w in wordpiece_words() if len(w) > 1]
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    writer.add_tokenizer_model("bert")
    writer.add_token_list(tokens)
    writer.add_token_types([int(t) for t in types])
    writer.add_bos_token_id(BERT_SPECIAL_IDS["[CLS]"])
    writer.add_eos_token_id(BERT_SPECIAL_IDS["[SEP]"])
    writer.add_unk_token_id(BERT_SPECIAL_IDS["[UNK]"])
    writer.add_sep_token_id(BERT_SPECIAL_IDS["[SEP]"])
    writer.add_pad_token_id(BERT_SPECIAL_IDS["[PAD]"])
    writer.add_mask_token_id(BERT_SPECIAL_IDS["[MASK]"])
    return len(tokens)


def _write_byte_level_bpe(writer: gguf.GGUFWriter) -> int:
    """RoBERTa's layout: specials, the 256 byte pieces, the learnt merges, ``<mask>``; pre-tokenizer ``jina-v1-en``
    (GPT-2's splitting, and a separator between a query and its document)."""
    merges = learn_merges(byte_level_words(), n_merges=4000)
    tokens = list(ROBERTA_SPECIAL_IDS) + byte_alphabet()
    tokens += list(dict.fromkeys(a + b for a, b in merges))  # one token per piece: two merges can make one
    tokens.append("<mask>")
    types = [gguf.TokenType.CONTROL] * 4 + [gguf.TokenType.NORMAL] * (len(tokens) - 5) + [gguf.TokenType.CONTROL]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("jina-v1-en")
    writer.add_token_list(tokens)
    writer.add_token_types([int(t) for t in types])
    writer.add_token_merges([f"{a} {b}" for a, b in merges])
    writer.add_bos_token_id(ROBERTA_SPECIAL_IDS["<s>"])
    writer.add_eos_token_id(ROBERTA_SPECIAL_IDS["</s>"])
    writer.add_unk_token_id(ROBERTA_SPECIAL_IDS["<unk>"])
    writer.add_sep_token_id(ROBERTA_SPECIAL_IDS["</s>"])
    writer.add_pad_token_id(ROBERTA_SPECIAL_IDS["<pad>"])
    writer.add_mask_token_id(len(tokens) - 1)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(True)
    return len(tokens)


def _write_tensors(writer: gguf.GGUFWriter, spec: TinyBert, n_vocab: int) -> None:
    rng = np.random.default_rng(spec.seed)
    d, ff = spec.n_embd, spec.n_ff

    def add(name: str, *shape: int, scale: float, dtype: type = np.float32) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(dtype))

    def linear(name: str, n_out: int, n_in: int) -> None:
        # Scaled by the fan-in, so every layer's output stays near unit size; matrices in F16, as the real "f16"
        # GGUFs hold them, and vectors in F32.
        add(f"{name}.weight", n_out, n_in, scale=spec.weight_scale / np.sqrt(n_in), dtype=np.float16)
        add(f"{name}.bias", n_out, scale=0.1)

    def norm(name: str) -> None:
        writer.add_tensor(f"{name}.weight", np.ones(d, dtype=np.float32))
        add(f"{name}.bias", d, scale=0.1)

    add("token_embd.weight", n_vocab, d, scale=1.0, dtype=np.float16)
    add("token_types.weight", 2, d, scale=1.0)  # the converter keeps token types and positions in F32
    if spec.arch == "bert":
        add("position_embd.weight", spec.context_length, d, scale=1.0)
    else:
        linear("cls", 1, d)  # the relevance score: tanh of one projection of the first token's state
    norm("token_embd_norm")
    for i in range(spec.n_layer):
        p = f"blk.{i}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            linear(f"{p}.{name}", d, d)
        norm(f"{p}.attn_output_norm")
        linear(f"{p}.ffn_up", ff if spec.arch == "bert" else 2 * ff, d)  # jina: up and gate in one (GEGLU)
        linear(f"{p}.ffn_down", d, ff)
        norm(f"{p}.layer_output_norm")
