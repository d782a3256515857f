"""Tiny random-weight multimodal projectors (mmproj GGUFs) for LFM2-VL (``lfm2``) and LFM2-Audio (``lfm2a``).

llama.cpp's mtmd loads them like real projectors, so the tests exercise the real media path: image
tiling and token counts, audio mel frames, encoding, and embeddings decoded by the text model. The keys
and tensor shapes are the ones clip.cpp reads (see docs/testing.md); keys read as 32-bit
integers are written as UINT32, because clip.cpp asserts the type. The projector's output width must
equal the text model's ``n_embd``; the text model needs LFM2-VL's image tokens
(``TinyLfm2(vision_tokens=True)``), or mtmd aborts on tiled images.

Example::

    write_mmproj_gguf(tmp_path / "mmproj.gguf", TinyProjector(kind="both", n_embd_text=64))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import gguf
import numpy as np

from .lfm2 import finish_gguf


@dataclass(frozen=True, slots=True, kw_only=True)
class TinyProjector:
    """Shape of a random projector; the defaults make a ~250 KB vision or ~2.4 MB audio file."""

    seed: int = 0
    kind: Literal["vision", "audio", "both"] = "vision"
    #: Must equal the text model's embedding width.
    n_embd_text: int = 64
    #: Encoder width, layers and heads (both encoders).
    width: int = 32
    n_layer: int = 2
    n_head: int = 2
    n_ff_vision: int = 64
    n_ff_audio: int = 128
    projector_hidden: int = 64
    input_norm: bool = True
    #: Audio sub-sampling channels, mel bins (a multiple of 8) and position rows (>= 1500: audio up to rows/50 s).
    sub_channels: int = 8
    n_mel: int = 128
    position_rows: int = 16392
    weight_scale: float = 0.5
    #: Matrices in F16 (as real projectors ship) instead of F32; norms and biases stay F32.
    f16_matrices: bool = False


def lfm2_vl_450m_projector(seed: int = 0, n_embd_text: int = 1024) -> TinyProjector:
    """A vision projector shaped like LFM2-VL-450M's (SigLIP2 base: 12 layers, width 768), for benchmarks.

    About 90 M random F16 weights; pair it with :func:`lfm2_350m_shape` ``(vision_tokens=True)``.
    """
    return TinyProjector(
        seed=seed,
        kind="vision",
        n_embd_text=n_embd_text,
        width=768,
        n_layer=12,
        n_head=12,
        n_ff_vision=3072,
        projector_hidden=2560,
        weight_scale=0.2,
        f16_matrices=True,
    )


def write_mmproj_gguf(path: str | Path, spec: TinyProjector | None = None) -> Path:
    """Write a random-weight projector to ``path`` and return the path."""
    spec = spec or TinyProjector()
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), "clip")
    rng = np.random.default_rng(spec.seed)

    def add(name: str, *numpy_shape: int, ones: bool = False, f16: bool = False) -> None:
        f16 = f16 or (spec.f16_matrices and len(numpy_shape) >= 2 and not name.startswith("v.position"))
        if ones:
            data = np.ones(numpy_shape, dtype=np.float32)
        else:  # scaled by the fan-in, so activations stay finite through the blocks; clip.cpp wants F32 (or F16)
            scale = np.float32(spec.weight_scale / np.sqrt(numpy_shape[-1]))
            data = rng.standard_normal(numpy_shape, dtype=np.float32) * scale
        writer.add_tensor(name, data.astype(np.float16) if f16 else data)

    writer.add_string("general.type", "mmproj")
    writer.add_name(f"Tiny-mmproj-{spec.kind}")
    writer.add_file_type(0)
    vision, audio = spec.kind in ("vision", "both"), spec.kind in ("audio", "both")
    writer.add_bool("clip.has_vision_encoder", vision)
    writer.add_bool("clip.has_audio_encoder", audio)
    if spec.kind == "both":
        writer.add_string("clip.vision.projector_type", "lfm2")
        writer.add_string("clip.audio.projector_type", "lfm2a")
    else:
        writer.add_string("clip.projector_type", "lfm2" if vision else "lfm2a")
    if vision:
        _write_vision(writer, spec, add)
    if audio:
        _write_audio(writer, spec, add)
    return finish_gguf(writer, path)


Add = Callable[..., None]


def _encoder_keys(writer: gguf.GGUFWriter, prefix: str, spec: TinyProjector, n_ff: int, eps: float) -> None:
    writer.add_uint32(f"{prefix}.embedding_length", spec.width)
    writer.add_uint32(f"{prefix}.feed_forward_length", n_ff)
    writer.add_uint32(f"{prefix}.block_count", spec.n_layer)
    writer.add_uint32(f"{prefix}.attention.head_count", spec.n_head)
    writer.add_uint32(f"{prefix}.projection_dim", spec.n_embd_text)
    writer.add_float32(f"{prefix}.attention.layer_norm_epsilon", eps)


def add_norm(add: Add, name: str, width: int) -> None:
    """A layer norm's weight (ones) and bias."""
    add(f"{name}.weight", width, ones=True)
    add(f"{name}.bias", width)


def add_linear(add: Add, name: str, n_out: int, n_in: int) -> None:
    """A linear layer's weight and bias."""
    add(f"{name}.weight", n_out, n_in)
    add(f"{name}.bias", n_out)


def _write_vision(writer: gguf.GGUFWriter, spec: TinyProjector, add: Add) -> None:
    """SigLIP-style tower: patch embedding, position grid, pre-norm blocks, pixel unshuffle 2x2, MLP."""
    d, ff, hidden = spec.width, spec.n_ff_vision, spec.projector_hidden
    _encoder_keys(writer, "clip.vision", spec, ff, 1e-6)
    writer.add_uint32("clip.vision.image_size", 256)
    writer.add_uint32("clip.vision.patch_size", 16)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    writer.add_uint32("clip.vision.projector.scale_factor", 2)
    writer.add_bool("clip.use_gelu", True)
    add("v.patch_embd.weight", d, 3, 16, 16)
    add("v.patch_embd.bias", d)
    add("v.position_embd.weight", 256, d)
    for i in range(spec.n_layer):
        p = f"v.blk.{i}"
        add_norm(add, f"{p}.ln1", d)
        add_norm(add, f"{p}.ln2", d)
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            add_linear(add, f"{p}.{name}", d, d)
        add_linear(add, f"{p}.ffn_up", ff, d)
        add_linear(add, f"{p}.ffn_down", d, ff)
    add_norm(add, "v.post_ln", d)
    if spec.input_norm:
        add_norm(add, "mm.input_norm", 4 * d)
    add_linear(add, "mm.1", hidden, 4 * d)
    add_linear(add, "mm.2", spec.n_embd_text, hidden)


def _write_audio(writer: gguf.GGUFWriter, spec: TinyProjector, add: Add) -> None:
    """Conformer: 3 stride-2 sub-sampling convolutions, macaron blocks with relative positions, MLP adapter."""
    d, ff, hidden, c = spec.width, spec.n_ff_audio, spec.projector_hidden, spec.sub_channels
    _encoder_keys(writer, "clip.audio", spec, ff, 1e-5)
    writer.add_uint32("clip.audio.num_mel_bins", spec.n_mel)
    for layer, shape in (("0", (c, 1, 3, 3)), ("2", (c, 1, 3, 3)), ("3", (c, c, 1, 1)), ("5", (c, 1, 3, 3))):
        add(f"a.conv1d.{layer}.weight", *shape)
        add(f"a.conv1d.{layer}.bias", c, 1, 1)
    add("a.conv1d.6.weight", c, c, 1, 1)
    add("a.conv1d.6.bias", c, 1, 1)
    add_linear(add, "a.pre_encode.out", d, c * spec.n_mel // 8)
    # Not read by the graph, but its width is the projector's output width and its rows bound the audio length.
    add("a.position_embd.weight", spec.position_rows, spec.n_embd_text, f16=True)
    for i in range(spec.n_layer):
        p = f"a.blk.{i}"
        add_norm(add, f"{p}.ffn_norm", d)
        add_linear(add, f"{p}.ffn_up", ff, d)
        add_linear(add, f"{p}.ffn_down", d, ff)
        add_norm(add, f"{p}.ln1", d)
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            add_linear(add, f"{p}.{name}", d, d)
        add(f"{p}.linear_pos.weight", d, 512)  # the relative-position width is fixed at 512
        add(f"{p}.pos_bias_u", spec.n_head, d // spec.n_head)
        add(f"{p}.pos_bias_v", spec.n_head, d // spec.n_head)
        add_norm(add, f"{p}.norm_conv", d)
        add_linear(add, f"{p}.conv_pw1", 2 * d, d)
        add_linear(add, f"{p}.conv_dw", d, 9)  # the depthwise kernel must be 9 wide
        add_norm(add, f"{p}.conv_norm", d)
        add_linear(add, f"{p}.conv_pw2", d, d)
        add_norm(add, f"{p}.ffn_norm_1", d)
        add_linear(add, f"{p}.ffn_up_1", ff, d)
        add_linear(add, f"{p}.ffn_down_1", d, ff)
        add_norm(add, f"{p}.ln2", d)
    add_norm(add, "mm.a.mlp.0", d)
    add_linear(add, "mm.a.mlp.1", hidden, d)
    add_linear(add, "mm.a.mlp.3", spec.n_embd_text, hidden)
