"""A tiny random-weight Gemma 3 (``gemma3``) and its vision projector (``clip``, projector type ``gemma3``), as
the suite's tinygemma3 pairs them: a text model with Gemma 3's chat template, and a SigLIP tower that
average-pools its patches into a fixed number of image tokens.

llama.cpp loads them as real Gemma 3 checkpoints (src/models/gemma3.cpp; tools/mtmd/clip.cpp, models/siglip.cpp):
5 sliding-window layers then a global one, query and key norms, tied output embeddings; the vocabulary is
SentencePiece (``tokenizer.ggml.model = llama``, no space prefix) with Gemma's special tokens, byte fallback,
and pieces learnt from a fixed English text (:mod:`.vocab`). mtmd wraps each image in ``<start_of_image>`` and
``<end_of_image>``, and decodes its tokens with non-causal attention.

Example::

    text = write_gemma3_gguf(tmp_path / "gemma3.gguf", TinyGemma3(seed=1))
    mmproj = write_gemma3_mmproj_gguf(tmp_path / "mmproj.gguf", TinyGemma3Projector(seed=1))
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from .lfm2 import finish_gguf
from .mmproj import add_linear, add_norm
from .vocab import learn_merges, spm_words

#: Gemma's control tokens at their real ids (0-4), then the turn and image markers (real ids 105, 106,
#: 255999, 256000; here kept low, so the vocabulary stays small).
GEMMA3_SPECIAL_TOKENS: tuple[str, ...] = (
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<mask>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
)
_USER_DEFINED = ("<start_of_image>", "<end_of_image>", "\n")

#: The chat template of Gemma 3 instruct checkpoints: the system prompt joins the first user turn, the
#: assistant is ``model``, an image part is ``<start_of_image>``.
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    '    {%- set first_user_prefix = "" -%}\n'
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    '        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}\n'
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    '        {%- set role = "model" -%}\n'
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    '        {{ raise_exception("Invalid content type") }}\n'
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TinyGemma3:
    """Shape and identity of a random Gemma 3 text model; the defaults make a ~1.1 MB file."""

    seed: int = 0
    #: Must equal the projector's ``n_embd_text``.
    n_embd: int = 64
    n_ff: int = 128
    n_head: int = 4
    n_head_kv: int = 1
    head_dim: int = 16
    #: Gemma 3's layer pattern is fixed at 5 sliding-window layers then a global one: 6 layers have both kinds.
    n_layer: int = 6
    sliding_window: int = 512
    context_length: int = 32768
    name: str = "Tiny-Gemma3-Test"
    chat_template: str | None = GEMMA3_CHAT_TEMPLATE
    weight_scale: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TinyGemma3Projector:
    """Shape of a random Gemma 3 vision projector; the defaults make a ~0.1 MB file and 64 tokens an image."""

    seed: int = 0
    #: The text model's width (the projection's output).
    n_embd_text: int = 64
    width: int = 32
    n_layer: int = 2
    n_head: int = 2
    n_ff: int = 64
    #: Every image is resized to this square, cut into patches, and each side's patches average-pooled by
    #: ``pool`` (Gemma 3 pools 4; the suite's tinygemma3 writes its own, as this does).
    image_size: int = 128
    patch_size: int = 8
    pool: int = 2
    weight_scale: float = 0.5

    @property
    def n_image_tokens(self) -> int:
        """Tokens each image takes, whatever its size."""
        return (self.image_size // self.patch_size // self.pool) ** 2


def write_gemma3_gguf(path: str | Path, spec: TinyGemma3 | None = None) -> Path:
    """Write a random-weight Gemma 3 text model to ``path`` and return the path."""
    spec = spec or TinyGemma3()
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), "gemma3")
    n_vocab = _write_vocabulary(writer, spec)
    writer.add_name(spec.name)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_key_length(spec.head_dim)
    writer.add_value_length(spec.head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_sliding_window(spec.sliding_window)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _write_text_tensors(writer, spec, n_vocab)
    return finish_gguf(writer, path)


def _write_vocabulary(writer: gguf.GGUFWriter, spec: TinyGemma3) -> int:
    """Gemma's layout: specials (score -1000), the 256 byte-fallback pieces, the learnt pieces scored by merge
    order (SentencePiece merges the highest score first), then single characters."""
    tokens = [*GEMMA3_SPECIAL_TOKENS, "\n"]
    types = [gguf.TokenType.USER_DEFINED if t in _USER_DEFINED else gguf.TokenType.CONTROL for t in tokens]
    types[GEMMA3_SPECIAL_TOKENS.index("<unk>")] = gguf.TokenType.UNKNOWN
    scores = [-1000.0] * len(tokens)
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    scores += [0.0] * 256
    pieces = [a + b for a, b in learn_merges(spm_words(), n_merges=4000)]
    pieces += ["\u2581", *(c for c in string.printable if not c.isspace())]
    for rank, piece in enumerate(dict.fromkeys(pieces)):  # one token per piece: two merges can make one
        tokens.append(piece)
        types.append(gguf.TokenType.NORMAL)
        scores.append(-1.0 - rank)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types([int(t) for t in types])
    writer.add_bos_token_id(GEMMA3_SPECIAL_TOKENS.index("<bos>"))
    writer.add_eos_token_id(GEMMA3_SPECIAL_TOKENS.index("<eos>"))
    writer.add_unk_token_id(GEMMA3_SPECIAL_TOKENS.index("<unk>"))
    writer.add_pad_token_id(GEMMA3_SPECIAL_TOKENS.index("<pad>"))
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)
    if spec.chat_template is not None:
        writer.add_chat_template(spec.chat_template)
    return len(tokens)


def _write_text_tensors(writer: gguf.GGUFWriter, spec: TinyGemma3, n_vocab: int) -> None:
    rng = np.random.default_rng(spec.seed)

    def add(name: str, *shape: int) -> None:
        scale = np.float32(spec.weight_scale / np.sqrt(shape[-1]))  # by the fan-in: activations stay near 1
        writer.add_tensor(name, rng.standard_normal(shape, dtype=np.float32) * scale)

    def norm(name: str, width: int) -> None:
        writer.add_tensor(name, np.ones(width, dtype=np.float32))  # Gemma's GGUFs hold 1 + the norm's weight

    d, q, kv = spec.n_embd, spec.n_head * spec.head_dim, spec.n_head_kv * spec.head_dim
    # Tied output: logits are the embeddings' dot products with the final state, so they stay moderate.
    writer.add_tensor("token_embd.weight", rng.standard_normal((n_vocab, d), dtype=np.float32) * np.float32(0.5))
    norm("output_norm.weight", d)
    for i in range(spec.n_layer):
        p = f"blk.{i}"
        norm(f"{p}.attn_norm.weight", d)
        add(f"{p}.attn_q.weight", q, d)
        add(f"{p}.attn_k.weight", kv, d)
        add(f"{p}.attn_v.weight", kv, d)
        add(f"{p}.attn_output.weight", d, q)
        norm(f"{p}.attn_q_norm.weight", spec.head_dim)
        norm(f"{p}.attn_k_norm.weight", spec.head_dim)
        norm(f"{p}.post_attention_norm.weight", d)
        norm(f"{p}.ffn_norm.weight", d)
        add(f"{p}.ffn_gate.weight", spec.n_ff, d)
        add(f"{p}.ffn_up.weight", spec.n_ff, d)
        add(f"{p}.ffn_down.weight", d, spec.n_ff)
        norm(f"{p}.post_ffw_norm.weight", d)


def write_gemma3_mmproj_gguf(path: str | Path, spec: TinyGemma3Projector | None = None) -> Path:
    """Write a random-weight Gemma 3 vision projector to ``path`` and return the path."""
    spec = spec or TinyGemma3Projector()
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_string("general.type", "mmproj")
    writer.add_name("Tiny-Gemma3-mmproj")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_bool("clip.has_audio_encoder", False)
    writer.add_string("clip.projector_type", "gemma3")
    # clip.cpp asserts 32-bit keys' types, so integers go in as UINT32.
    for key, value in (
        ("embedding_length", spec.width),
        ("feed_forward_length", spec.n_ff),
        ("block_count", spec.n_layer),
        ("attention.head_count", spec.n_head),
        ("projection_dim", spec.n_embd_text),
        ("image_size", spec.image_size),
        ("patch_size", spec.patch_size),
        ("projector.scale_factor", spec.pool),
    ):
        writer.add_uint32(f"clip.vision.{key}", value)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    writer.add_bool("clip.use_gelu", True)
    _write_vision_tensors(writer, spec)
    return finish_gguf(writer, path)


def _write_vision_tensors(writer: gguf.GGUFWriter, spec: TinyGemma3Projector) -> None:
    """SigLIP: patch embedding, one learnt position per patch, pre-norm blocks, a final norm; then Gemma 3's
    pooling, an RMS norm and one projection into the text model's width."""
    rng = np.random.default_rng(spec.seed)

    def add(name: str, *numpy_shape: int, ones: bool = False) -> None:
        if ones:
            data = np.ones(numpy_shape, dtype=np.float32)
        else:  # scaled by the fan-in, so activations stay finite through the blocks
            data = rng.standard_normal(numpy_shape, dtype=np.float32)
            data *= np.float32(spec.weight_scale / np.sqrt(numpy_shape[-1]))
        writer.add_tensor(name, data)

    d, p = spec.width, spec.patch_size
    add("v.patch_embd.weight", d, 3, p, p)
    add("v.patch_embd.bias", d)
    add("v.position_embd.weight", (spec.image_size // p) ** 2, d)
    for i in range(spec.n_layer):
        block = f"v.blk.{i}"
        add_norm(add, f"{block}.ln1", d)
        add_norm(add, f"{block}.ln2", d)
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            add_linear(add, f"{block}.{name}", d, d)
        add_linear(add, f"{block}.ffn_up", spec.n_ff, d)
        add_linear(add, f"{block}.ffn_down", d, spec.n_ff)
    add_norm(add, "v.post_ln", d)
    add("mm.soft_emb_norm.weight", d, ones=True)
    add("mm.input_projection.weight", d, spec.n_embd_text)
