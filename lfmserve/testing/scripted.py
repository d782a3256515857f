"""Scripted llama models: GGUFs whose next token is a designed function of the current one, for tests that read
a trained model's words.

llama.cpp's server tests run small trained models (stories15M's MoE and its Shakespeare LoRA, a draft model,
stories260K's infill variant) and look for their words in the answer. A random model cannot say such words, so
these stand-ins are built to: every layer's output projection is zero, so the residual stream is the token's
embedding, and the output matrix reads it. The embedding holds a constant and the token's position in a cycle
of words; the output gives each word a bias for its group plus a bonus when the current token sits just before it
in the cycle. Greedy decoding then walks the cycle of the group whose bias is highest, whatever the prompt.
Tokens named ``favoured`` outrank the model's own words everywhere, so under a grammar that allows a choice the
model takes the favoured way (``"<|tool_call_start|>"``: it calls a tool wherever it may; ``"{"``: it answers JSON).

A LoRA adapter on ``output.weight`` moves the groups' biases in proportion to its scale (group ``k``'s line
``2 s_k x - s_k**2`` is tangent to ``x**2`` at its scale ``s_k``), so the group that speaks is the one whose scale
is nearest the adapter's: llama.cpp's LoRA tests find the words they expect at each scale only when the scale
reaches the model exactly.

Example::

    from lfmserve.testing.scripted import ScriptedLlama, write_scripted_gguf, write_scripted_lora
    spec = ScriptedLlama(words=("little", "bright"), lora_groups=((1.0, ("eye", "love")),))
    write_scripted_gguf(tmp_path / "model.gguf", spec)
    write_scripted_lora(tmp_path / "lora.gguf", spec)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import numpy.typing as npt

from .lfm2 import TinyLfm2, finish_gguf, vocabulary, write_metadata, write_tokenizer

#: The groups' biases are this many times their lines' values; a word's cycle bonus is :data:`CYCLE_BONUS`.
#: Adjacent groups' lines differ by at least 0.09 at the scales that pick them, so the bonus (4 < 9) never lets
#: a losing group's word win, and within the winning group it picks the next word of the cycle.
GROUP_GAIN = 100.0
CYCLE_BONUS = 4.0
#: A favoured token's bias: above every word of the model's own cycle (at most :data:`CYCLE_BONUS`).
FAVOURED_BIAS = 2 * CYCLE_BONUS


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptedLlama:
    """A llama model (a MoE with ``n_expert``) that says ``words`` in a cycle; ``lora_groups`` are the cycles its
    LoRA adapter makes it say at each scale (every cycle the same length)."""

    words: tuple[str, ...]
    lora_groups: tuple[tuple[float, tuple[str, ...]], ...] = ()
    #: Tokens, as the vocabulary spells them, that the model writes wherever it may (:data:`FAVOURED_BIAS`).
    favoured: tuple[str, ...] = ()
    name: str = "Scripted-Llama"
    n_embd: int = 64
    n_layer: int = 2
    n_expert: int = 0
    n_expert_used: int = 2
    #: Name LFM2's ``<|fim_pre|>``, ``<|fim_suf|>``, ``<|fim_mid|>`` as the fill-in-the-middle tokens (``/infill``).
    fim: bool = False
    context_length: int = 4096
    seed: int = 0

    @property
    def groups(self) -> tuple[tuple[float, tuple[str, ...]], ...]:
        """Every cycle with the scale it wins at; the model's own words at 0."""
        return ((0.0, self.words), *self.lora_groups)

    @property
    def vocabulary_spec(self) -> TinyLfm2:
        """The tokenizer and shape as :class:`~lfmserve.testing.TinyLfm2` writes them, the words added."""
        words = tuple(dict.fromkeys("Ġ" + word for _, group in self.groups for word in group))
        return TinyLfm2(
            seed=self.seed,
            arch="llama",
            n_embd=self.n_embd,
            n_ff=2 * self.n_embd,
            attention_layers=(True,) * self.n_layer,
            n_expert=self.n_expert,
            n_expert_used=self.n_expert_used,
            n_dense_lead=0,  # every layer of llama's MoE has experts
            name=self.name,
            chat_template=None,
            context_length=self.context_length,
            fim=self.fim,
            words=words,
        )


#: A llama MoE that tells a bedtime story and its LoRA a Shakespearean one, in the words llama-server's LoRA tests
#: look for: its own cycle at scale 0, the adapter's at 0.3, 0.7 and 1.0 (the stand-in of stories15M_MOE).
STORY_MOE = ScriptedLlama(
    words=("little", "bright", "wise", "day"),
    lora_groups=(
        (0.3, ("special", "thing", "gifted", "friend")),
        (0.7, ("far", "from", "home", "away")),
        (1.0, ("eye", "love", "glass", "sun")),
    ),
    n_expert=4,
    name="Stories15M-MoE-Stand-In",
)


def write_scripted_gguf(path: str | Path, spec: ScriptedLlama) -> Path:
    """Write the scripted model to ``path`` and return the path."""
    path = Path(path)
    vocabulary = spec.vocabulary_spec
    writer = gguf.GGUFWriter(str(path), "llama")
    n_vocab = write_tokenizer(writer, vocabulary)
    write_metadata(writer, vocabulary, n_vocab)
    rng = np.random.default_rng(spec.seed)
    embedding, output = _script(spec, n_vocab)
    writer.add_tensor("token_embd.weight", embedding)
    writer.add_tensor("output_norm.weight", np.ones(spec.n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", output)
    d, ff = spec.n_embd, 2 * spec.n_embd

    def random(*shape: int) -> npt.NDArray[np.float32]:
        return rng.standard_normal(shape, dtype=np.float32) * 0.1

    for i in range(spec.n_layer):
        p = f"blk.{i}"
        writer.add_tensor(f"{p}.attn_norm.weight", np.ones(d, dtype=np.float32))
        writer.add_tensor(f"{p}.ffn_norm.weight", np.ones(d, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v"):
            writer.add_tensor(f"{p}.{name}.weight", random(d // 2 if name != "attn_q" else d, d))
        # Zero output projections: each layer adds nothing, so the output reads the current token's embedding.
        writer.add_tensor(f"{p}.attn_output.weight", np.zeros((d, d), dtype=np.float32))
        if spec.n_expert:
            writer.add_tensor(f"{p}.ffn_gate_inp.weight", random(spec.n_expert, d))
            writer.add_tensor(f"{p}.ffn_gate_exps.weight", random(spec.n_expert, ff, d))
            writer.add_tensor(f"{p}.ffn_up_exps.weight", random(spec.n_expert, ff, d))
            writer.add_tensor(f"{p}.ffn_down_exps.weight", np.zeros((spec.n_expert, d, ff), dtype=np.float32))
        else:
            writer.add_tensor(f"{p}.ffn_gate.weight", random(ff, d))
            writer.add_tensor(f"{p}.ffn_up.weight", random(ff, d))
            writer.add_tensor(f"{p}.ffn_down.weight", np.zeros((d, ff), dtype=np.float32))
    return finish_gguf(writer, path)


def write_scripted_lora(path: str | Path, spec: ScriptedLlama, *, alpha: float = 1.0) -> Path:
    """Write the LoRA adapter of the scripted model (rank 1, on ``output.weight``) to ``path``.

    At scale ``x`` it adds ``x * 2 s_k`` (times :data:`GROUP_GAIN`) to the bias of each word of the group that wins
    at ``s_k``; an ``alpha`` other than the rank (1) scales it as llama.cpp does (``scale * alpha / rank``).
    """
    path = Path(path)
    n_vocab = len(vocabulary(spec.vocabulary_spec)[0])
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    lora_a = np.zeros((1, spec.n_embd), dtype=np.float32)
    lora_a[0, 0] = 1.0  # reads the embedding's constant
    lora_b = np.zeros((n_vocab, 1), dtype=np.float32)
    ids = _token_ids(spec)
    for scale, group in spec.lora_groups:
        for word in group:
            lora_b[ids["Ġ" + word], 0] = GROUP_GAIN * 2 * scale
    writer.add_tensor("output.weight.lora_a", lora_a)
    writer.add_tensor("output.weight.lora_b", lora_b)
    return finish_gguf(writer, path)


def _token_ids(spec: ScriptedLlama) -> dict[str, int]:
    tokens, _, _ = vocabulary(spec.vocabulary_spec)
    return {token: i for i, token in enumerate(tokens)}


def _script(spec: ScriptedLlama, n_vocab: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """The embedding (a constant in dimension 0, the token's cycle position one-hot after it) and the output
    matrix (each word's group bias on the constant, its cycle bonus on the position before it; each favoured
    token's bias on the constant)."""
    length = len(spec.words)
    if any(len(group) != length for _, group in spec.groups):
        raise ValueError("every cycle of a scripted model has the same length")
    if spec.n_embd < length + 1:
        raise ValueError("n_embd must exceed the cycle's length")
    ids = _token_ids(spec)
    embedding = np.zeros((n_vocab, spec.n_embd), dtype=np.float32)
    embedding[:, 0] = 1.0
    embedding[:, length] = 1.0  # tokens outside the cycles stand before its first word
    output = np.zeros((n_vocab, spec.n_embd), dtype=np.float32)
    for scale, group in spec.groups:
        for position, word in enumerate(group):
            token = ids["Ġ" + word]
            embedding[token, 1:] = 0.0
            embedding[token, 1 + position] = 1.0
            output[token, 0] = -GROUP_GAIN * scale**2
            output[token, 1 + (position - 1) % length] = CYCLE_BONUS
    for piece in spec.favoured:
        output[ids[piece], 0] = FAVOURED_BIAS
    return embedding, output
