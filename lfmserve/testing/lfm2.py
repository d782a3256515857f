"""Tiny random-weight LFM2 GGUF files (and the LFM2-350M shape) for tests and benchmarks.

The files are written with the ``gguf`` package and loaded by llama.cpp exactly like a real
checkpoint, so every test exercises the real loading, tokenizing and decoding path. The weights
are random (deterministic from ``seed``); the tokenizer is a real byte-level BPE whose merges are
learnt from a fixed text, with LFM2's special tokens at their real ids and LFM2's chat template.

Example::

    from lfmserve.testing import TinyLfm2, write_lfm2_gguf
    path = write_lfm2_gguf(tmp_path / "tiny.gguf", TinyLfm2(seed=1))
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np

from .vocab import byte_alphabet, learn_merges

#: LFM2's special tokens, at the ids the real LFM2 vocabulary gives them.
LFM2_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|pad|>",
    "<|startoftext|>",
    "<|endoftext|>",
    "<|fim_pre|>",
    "<|fim_mid|>",
    "<|fim_suf|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|tool_list_start|>",
    "<|tool_list_end|>",
    "<|tool_call_start|>",
    "<|tool_call_end|>",
    "<|tool_response_start|>",
    "<|tool_response_end|>",
)
BOS_ID = 1
EOS_ID = 7  # <|im_end|>: end of turn and end of generation
PAD_ID = 0
#: Tokens that the thinking and vision variants add; plain text tokens for the tokenizer.
EXTRA_TOKENS: tuple[str, ...] = ("<think>", "</think>", "<image>", "<|image_start|>", "<|image_end|>")
#: LFM2-VL's tile tokens: mtmd writes them between the tiles of a large image (a row and column each, then the
#: thumbnail), and aborts the process on a tiled image when the vocabulary lacks them.
VISION_TOKENS: tuple[str, ...] = (
    "<|img_thumbnail|>",
    *(f"<|img_row_{row}_col_{col}|>" for row in range(1, 11) for col in range(1, 11)),
)

#: The chat template of LFM2 instruct checkpoints (ChatML with BOS), tools in the system turn.
LFM2_CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    '{%- set ns = namespace(system_prompt="") -%}'
    '{%- if messages[0]["role"] == "system" -%}'
    '{%- set ns.system_prompt = messages[0]["content"] -%}'
    "{%- set messages = messages[1:] -%}"
    "{%- endif -%}"
    "{%- if tools -%}"
    '{%- set ns.system_prompt = ns.system_prompt + ("\\n" if ns.system_prompt else "")'
    ' + "List of tools: <|tool_list_start|>" + (tools | tojson) + "<|tool_list_end|>" -%}'
    "{%- endif -%}"
    "{%- if ns.system_prompt -%}"
    '{{- "<|im_start|>system\\n" + ns.system_prompt + "<|im_end|>\\n" -}}'
    "{%- endif -%}"
    "{%- for message in messages -%}"
    '{{- "<|im_start|>" + message["role"] + "\\n" -}}'
    '{%- set content = message["content"] -%}'
    "{%- if content is not string -%}{%- set content = content | tojson -%}{%- endif -%}"
    '{%- if message["role"] == "tool" -%}'
    '{%- set content = "<|tool_response_start|>" + content + "<|tool_response_end|>" -%}'
    "{%- endif -%}"
    '{{- content + "<|im_end|>\\n" -}}'
    "{%- endfor -%}"
    '{%- if add_generation_prompt -%}{{- "<|im_start|>assistant\\n" -}}{%- endif -%}'
)

#: Text the BPE merges are learnt from: chat-like English, so prompts tokenize into few tokens.
_MERGE_CORPUS = (
    "You are a helpful assistant. What is machine learning? Machine learning is the study of "
    "computer programs that learn from data. Write a haiku about the ocean. The ocean is wide and "
    "the waves are blue. My name is Ada. What is my name? Your name is Ada. Hello there, how are "
    "you today? I am fine, thank you. The weather in Paris is sunny and warm. Tell me a story about "
    "a cat and a dog that lived in a small house near the river. Once upon a time there was a "
    "little model that could answer questions about the world, the people in it and the things "
    "they make. Please answer in one sentence. Summarize the following text. Translate to French."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TinyLfm2:
    """Shape and identity of a random LFM2 model; the defaults make a ~1 MB file."""

    seed: int = 0
    n_embd: int = 64
    n_ff: int = 128
    n_head: int = 4
    n_head_kv: int = 2
    #: Per layer: True for attention, False for a short-convolution layer.
    attention_layers: tuple[bool, ...] = (False, True, False, True)
    n_merges: int = 200
    #: Total vocabulary; tokens past the learnt ones are fillers the tokenizer never produces.
    n_vocab: int | None = None
    context_length: int = 4096
    name: str = "Tiny-LFM2-Test"
    basename: str | None = None
    size_label: str | None = None
    chat_template: str | None = LFM2_CHAT_TEMPLATE
    #: ``general.sampling.*`` keys to write, e.g. ``{"temp": 0.5, "top_k": 7}``.
    sampling: dict[str, float | int] = field(default_factory=dict)
    #: Mixture of experts (``lfm2moe``): experts per MoE layer, 0 for the dense ``lfm2``.
    n_expert: int = 0
    n_expert_used: int = 2
    n_dense_lead: int = 1
    weight_scale: float = 0.5
    dtype: type = np.float32
    #: ``"llama"`` writes a plain attention-only model instead (every layer attention, no short
    #: convolutions), for the paths a hybrid model cannot take, such as KV shifting; ``"qwen3"`` the same
    #: with LFM2's query and key norms (the architecture of :func:`tiny_reranker`).
    arch: str = "lfm2"
    #: Add LFM2-VL's tile tokens, as a text model paired with a vision projector needs.
    vision_tokens: bool = False
    #: A classification head (``cls.output``) with these labels, as rerankers have: see :func:`tiny_reranker`.
    classifier_labels: tuple[str, ...] = ()
    #: ``tokenizer.chat_template.rerank``: a reranker's prompt with ``{query}`` and ``{document}`` in it.
    rerank_template: str | None = None
    #: The vocabulary's ``add_eos_token`` and ``add_sep_token`` (the separator is ``<|endoftext|>``), which
    #: llama-server's fallback reranking prompt reads.
    add_eos: bool = False
    add_sep: bool = False
    #: Name LFM2's ``<|fim_pre|>``, ``<|fim_suf|>`` and ``<|fim_mid|>`` as the fill-in-the-middle tokens
    #: (``tokenizer.ggml.fim_*_token_id``), as a code model's vocabulary does (``/infill``).
    fim: bool = False
    #: Whole words added at the end of the vocabulary (``Ġ`` for a leading space), as tokens the tokenizer never
    #: produces and a model may say (:mod:`~lfmserve.testing.scripted`).
    words: tuple[str, ...] = ()


def lfm2_350m_shape(seed: int = 0) -> TinyLfm2:
    """LFM2-350M's real shape (FACTS.md) with random weights, for benchmarks."""
    return _lfm2_dense_shape(seed, n_embd=1024, n_ff=4608, n_head=16, name="LFM2-350M-random")


def lfm2_1_2b_shape(seed: int = 0) -> TinyLfm2:
    """LFM2-1.2B's real shape (FACTS.md) with random weights, for the memory benchmark."""
    return _lfm2_dense_shape(seed, n_embd=2048, n_ff=8192, n_head=32, name="LFM2-1.2B-random")


def _lfm2_dense_shape(seed: int, *, n_embd: int, n_ff: int, n_head: int, name: str) -> TinyLfm2:
    """The dense LFM2 family's layout: 16 layers (attention at 2, 5, 8, 10, 12, 14), 8 KV heads, 65,536 tokens."""
    attention = {2, 5, 8, 10, 12, 14}
    return TinyLfm2(
        seed=seed,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=8,
        attention_layers=tuple(i in attention for i in range(16)),
        n_merges=2000,
        n_vocab=65536,
        context_length=32768,
        name=name,
        weight_scale=0.02,
        dtype=np.float16,
    )


#: A reranking prompt in the form of Qwen3-Reranker's (the model answers "yes" or "no").
RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the document answers the query: yes or no.<|im_end|>\n"
    "<|im_start|>user\nQuery: {query}\nDocument: {document}<|im_end|>\n<|im_start|>assistant\n"
)


def tiny_reranker(seed: int = 0, *, template: bool = True) -> TinyLfm2:
    """A random reranker llama.cpp ranks with: Qwen3's architecture (causal; the score is a softmax over
    the head's two labels at the last token, as Qwen3-Reranker's), with :data:`RERANK_TEMPLATE` or, without
    ``template``, a vocabulary that adds EOS and a separator, as llama-server's fallback prompt expects."""
    return TinyLfm2(
        seed=seed,
        arch="qwen3",
        name="Tiny-Reranker-Test",
        classifier_labels=("yes", "no"),
        rerank_template=RERANK_TEMPLATE if template else None,
        add_eos=not template,
        add_sep=not template,
    )


@functools.cache
def _learn_merges(n_merges: int) -> tuple[tuple[str, str], ...]:
    """Byte-level BPE training on the fixed corpus: the most frequent pair wins, ties by order. The merges are
    learnt once per size, since a test session writes over a hundred models."""
    alphabet = byte_alphabet()
    words = [tuple(alphabet[b] for b in (" " + w if i else w).encode()) for i, w in enumerate(_MERGE_CORPUS.split(" "))]
    return tuple(learn_merges(words, n_merges))


def vocabulary(spec: TinyLfm2) -> tuple[list[str], list[int], list[str]]:
    """Tokens, token types and merges: specials first (real ids), then bytes, merges, extras, words."""
    merges = _learn_merges(spec.n_merges)
    tokens = list(LFM2_SPECIAL_TOKENS)
    types = [gguf.TokenType.CONTROL] * len(tokens)
    seen = set(tokens)
    for piece in byte_alphabet() + [a + b for a, b in merges]:
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
            types.append(gguf.TokenType.NORMAL)
    for extra in EXTRA_TOKENS + (VISION_TOKENS if spec.vision_tokens else ()):
        tokens.append(extra)
        types.append(gguf.TokenType.USER_DEFINED)
    existing = set(tokens)
    for word in dict.fromkeys(spec.words):
        if word not in existing:  # a word a merge already makes keeps that token
            tokens.append(word)
            types.append(gguf.TokenType.NORMAL)
    if spec.n_vocab is not None:
        if spec.n_vocab < len(tokens):
            raise ValueError(f"n_vocab {spec.n_vocab} is smaller than the {len(tokens)} tokens learnt")
        for i in range(len(tokens), spec.n_vocab):
            # Plain text that no merge produces: a random model that samples one still streams visible text.
            tokens.append(f"f{i}")
            types.append(gguf.TokenType.NORMAL)
    return tokens, [int(t) for t in types], [f"{a} {b}" for a, b in merges]


def write_metadata(writer: gguf.GGUFWriter, spec: TinyLfm2, n_vocab: int) -> None:
    """The spec's shape as its architecture's GGUF keys (``writer`` was opened with that architecture)."""
    n_layer = len(spec.attention_layers)
    writer.add_name(spec.name)
    if spec.basename:
        writer.add_basename(spec.basename)
    if spec.size_label:
        writer.add_size_label(spec.size_label)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    if spec.arch != "lfm2":
        writer.add_head_count_kv(spec.n_head_kv)
        writer.add_rope_dimension_count(spec.n_embd // spec.n_head)
    else:
        writer.add_head_count_kv([spec.n_head_kv if a else 0 for a in spec.attention_layers])
        writer.add_shortconv_l_cache(3)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if spec.dtype == np.float16 else gguf.LlamaFileType.ALL_F32)
    if spec.n_expert:
        writer.add_expert_count(spec.n_expert)
        writer.add_expert_used_count(spec.n_expert_used)
        writer.add_expert_feed_forward_length(spec.n_ff)
        writer.add_leading_dense_block_count(spec.n_dense_lead)
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    for key, value in spec.sampling.items():
        getattr(writer, f"add_sampling_{key}")(value)
    if spec.classifier_labels:
        writer.add_classifier_output_labels(list(spec.classifier_labels))


def write_tokenizer(writer: gguf.GGUFWriter, spec: TinyLfm2) -> int:
    """The spec's vocabulary, special tokens and chat templates; returns the vocabulary's size."""
    tokens, types, merges = vocabulary(spec)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("lfm2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_pad_token_id(PAD_ID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(spec.add_eos)
    if spec.fim:
        for key, token in (("FIM_PRE_ID", "<|fim_pre|>"), ("FIM_SUF_ID", "<|fim_suf|>"), ("FIM_MID_ID", "<|fim_mid|>")):
            writer.add_uint32(getattr(gguf.Keys.Tokenizer, key), LFM2_SPECIAL_TOKENS.index(token))
    if spec.add_sep:
        writer.add_add_sep_token(True)
        writer.add_sep_token_id(LFM2_SPECIAL_TOKENS.index("<|endoftext|>"))
    templates = {"default": spec.chat_template, "rerank": spec.rerank_template}
    writer.add_chat_template([{"name": k, "template": v} for k, v in templates.items() if v is not None])
    return len(tokens)


def _write_tensors(writer: gguf.GGUFWriter, spec: TinyLfm2, n_vocab: int) -> None:
    rng = np.random.default_rng(spec.seed)
    scale = spec.weight_scale

    def add(name: str, *shape: int, ones: bool = False, f32: bool = False) -> None:
        # Norms and the short-convolution kernel stay F32 (llama.cpp's ssm_conv needs it), as in real LFM2
        # GGUFs; the matrices take the spec's dtype.
        if ones:
            writer.add_tensor(name, np.ones(shape, dtype=np.float32))
        else:
            data = rng.standard_normal(shape, dtype=np.float32) * scale
            writer.add_tensor(name, data if f32 else data.astype(spec.dtype))

    d, ff, head_dim = spec.n_embd, spec.n_ff, spec.n_embd // spec.n_head
    add("token_embd.weight", n_vocab, d)
    add("token_embd_norm.weight" if spec.arch == "lfm2" else "output_norm.weight", d, ones=True)
    if spec.classifier_labels:
        add("cls.output.weight", len(spec.classifier_labels), d)
    layers = spec.attention_layers if spec.arch == "lfm2" else (True,) * len(spec.attention_layers)
    for i, is_attention in enumerate(layers):
        p = f"blk.{i}"
        add(f"{p}.attn_norm.weight", d, ones=True)
        add(f"{p}.ffn_norm.weight", d, ones=True)
        if spec.n_expert and i >= spec.n_dense_lead:
            add(f"{p}.ffn_gate_inp.weight", spec.n_expert, d)
            add(f"{p}.ffn_gate_exps.weight", spec.n_expert, ff, d)
            add(f"{p}.ffn_up_exps.weight", spec.n_expert, ff, d)
            add(f"{p}.ffn_down_exps.weight", spec.n_expert, d, ff)
            writer.add_tensor(f"{p}.exp_probs_b.bias", np.zeros(spec.n_expert, dtype=np.float32))
        else:
            add(f"{p}.ffn_gate.weight", ff, d)
            add(f"{p}.ffn_up.weight", ff, d)
            add(f"{p}.ffn_down.weight", d, ff)
        if is_attention:
            kv = spec.n_head_kv * head_dim
            add(f"{p}.attn_q.weight", d, d)
            add(f"{p}.attn_k.weight", kv, d)
            add(f"{p}.attn_v.weight", kv, d)
            add(f"{p}.attn_output.weight", d, d)
            if spec.arch != "llama":
                add(f"{p}.attn_q_norm.weight", head_dim, ones=True)
                add(f"{p}.attn_k_norm.weight", head_dim, ones=True)
        else:
            add(f"{p}.shortconv.conv.weight", d, 3, f32=True)
            add(f"{p}.shortconv.in_proj.weight", 3 * d, d)
            add(f"{p}.shortconv.out_proj.weight", d, d)


def write_lfm2_gguf(path: str | Path, spec: TinyLfm2 | None = None, *, n_split_tensors: int = 0) -> Path:
    """Write a random-weight LFM2 (or LFM2-MoE) GGUF to ``path`` and return the path; with ``n_split_tensors``, a
    split GGUF of that many tensors a part (``m.gguf`` -> ``m-00001-of-0000N.gguf`` ..., the first returned)."""
    spec = spec or TinyLfm2()
    path = Path(path)
    arch = "lfm2moe" if spec.n_expert else spec.arch
    writer = gguf.GGUFWriter(str(path), arch, split_max_tensors=n_split_tensors)
    n_vocab = write_tokenizer(writer, spec)
    write_metadata(writer, spec, n_vocab)
    _write_tensors(writer, spec, n_vocab)
    finish_gguf(writer, path)
    parts = writer.format_shard_names(path)
    return parts[0]


def finish_gguf(writer: gguf.GGUFWriter, path: Path) -> Path:
    """Write what ``writer`` holds (header, keys, tensors) to its file, close it, and return ``path``."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
