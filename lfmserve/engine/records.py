"""The records passed between the chat layer and the engine thread, and the seam the engine sees of a grammar."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from ..sampler_order import DEFAULT_ORDER
from .histograms import RequestHistograms
from .speculation import SpeculationConfig

#: A saved sequence state, as ``llama_state_seq_get_data_ext`` wrote it (checkpoints, the RAM cache).
StateBuffer = npt.NDArray[np.uint8]
FinishReason = Literal["stop", "length"]
#: How generation ended, with llama-server's names: end of generation token, stop string, limit.
StopType = Literal["eos", "word", "limit"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    """One request's sampler settings: llama-server's wire names, meanings and defaults (``common/common.h``).

    These field names are the only spelling of the sampling knobs: request bodies, ``Settings`` and the
    in-process API use them as they are.
    """

    temperature: float = 0.8
    #: Dynamic temperature: the entropy moves it within ``temperature`` ± range (0 = off).
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    #: Keep the tokens within this many standard deviations of the top logit (<= 0 = off).
    top_n_sigma: float = -1.0
    #: XTC: with this chance, drop every token above the threshold but the least likely of them.
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    #: DRY: penalise a token that would extend a repeat longer than the allowed length (multiplier 0 = off).
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    #: Strings a repeat may not run across (llama.cpp tokenizes them with the model's vocabulary).
    dry_sequence_breakers: tuple[str, ...] = ("\n", ":", '"', "*")
    #: Mirostat 1 or 2 (0 = off) replaces the whole chain after the logit bias with temperature and Mirostat.
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    #: Adaptive-p, when ``adaptive_p`` is in ``samplers``: pick tokens near this probability (< 0 = plain).
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.9
    #: The fewest candidates top-p, min-p, typical-p and XTC leave (0 = no floor).
    min_keep: int = 0
    #: The chain after the logit bias, by llama-server's names (:mod:`~lfmserve.engine.sampler_order`).
    samplers: tuple[str, ...] = DEFAULT_ORDER
    seed: int = -1
    #: (token id, bias) pairs; ``-inf`` bans the token.
    logit_bias: tuple[tuple[int, float], ...] = ()
    ignore_eos: bool = False

    @property
    def is_greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def penalises(self) -> bool:
        """The repetition penalties change something (llama.cpp's penalties sampler returns early otherwise)."""
        return self.repeat_last_n != 0 and (
            self.repeat_penalty != 1.0 or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0
        )

    def applied_logit_bias(self, eog_tokens: Iterable[int]) -> tuple[tuple[int, float], ...]:
        """The biases sampling applies: the request's, then under ``ignore_eos`` minus infinity for each end of
        generation token, in id order (llama-server adds them to the request's ``logit_bias`` so)."""
        if not self.ignore_eos:
            return self.logit_bias
        return self.logit_bias + tuple((token, float("-inf")) for token in sorted(eog_tokens))

    def to_json(self, eog_tokens: Iterable[int] = ()) -> dict[str, Any]:
        """The settings as llama-server shows them, the model's ``eog_tokens`` among the biases under
        ``ignore_eos``; a banned token's bias is ``null``, as llama-server's JSON writes minus infinity."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["seed"] = self.seed & 0xFFFFFFFF  # llama-server's seed is a uint32_t: -1 shows as 4294967295
        out["samplers"] = list(self.samplers)
        out["dry_sequence_breakers"] = list(self.dry_sequence_breakers)
        out["logit_bias"] = [
            {"bias": None if bias == float("-inf") else bias, "token": token}
            for token, bias in self.applied_logit_bias(eog_tokens)
        ]
        return out

    def updated(self, overrides: Mapping[str, Any]) -> SamplingParams:
        """A copy with the given (already validated) fields replaced; None values are skipped."""
        names = {f.name for f in fields(self)}
        return replace(self, **{k: v for k, v in overrides.items() if k in names and v is not None})


@dataclass(frozen=True, slots=True)
class ResolvedDefaults:
    """The sampling defaults a server applies and, per field, which layer set it (shown by ``/props``)."""

    params: SamplingParams
    sources: dict[str, str] = field(default_factory=dict)
    #: The LFM family whose table row matched the model, if any.
    family: str | None = None


#: Every sampling knob's name (the fields of :class:`SamplingParams`).
SAMPLING_NAMES: frozenset[str] = frozenset(f.name for f in fields(SamplingParams))


class TokenConstraint(Protocol):
    """A grammar the sampled tokens must follow (llguidance's masks implement it: ``engine.constraints``)."""

    @property
    def active(self) -> bool:
        """Whether :meth:`apply` would forbid anything now (a lazy grammar waits for its trigger token)."""

    @property
    def finished(self) -> bool:
        """A whole-output grammar is complete: nothing may follow, even under ``ignore_eos``."""

    def apply(self, logits: npt.NDArray[np.float32]) -> None:
        """Set, in place, every token the grammar does not allow next to minus infinity."""

    def accept(self, token: int) -> None:
        """Advance the grammar past the sampled token."""

    def allowed_prefix(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens``, in order from now, the grammar allows (nothing advances): a draft's tail past
        them would be rejected anyway, so it is not verified."""


@dataclass(frozen=True, slots=True)
class MediaSpan:
    """A media chunk of a prompt: positions ``[start, start + n_tokens)`` take its embeddings, not tokens.

    In ``prompt_tokens`` those positions hold ids derived from ``key`` (negative, never a vocabulary id:
    ``engine.media.media_token_ids``), so the prompt cache compares media as it compares text.
    """

    start: int
    n_tokens: int
    #: The media's content hash and the chunk's place in it (the tile of an image): the encoder cache's key.
    key: str
    #: What the encoder takes (an ``llama.mtmd.PromptChunk``).
    chunk: Any = field(compare=False, repr=False)

    @property
    def end(self) -> int:
        return self.start + self.n_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineRequest:
    """A tokenized prompt and how to continue it."""

    prompt_tokens: tuple[int, ...]
    #: The prompt's media chunks, in position order.
    media: tuple[MediaSpan, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    #: Tokens to generate; -1 = until end of generation or the context is full; 0 = only prefill.
    max_tokens: int = -1
    stop: tuple[str, ...] = ()
    cache_prompt: bool = True
    #: Slot to run in, or -1 for the engine's choice.
    id_slot: int = -1
    #: Special tokens whose text is kept in the output (tool-call markers); others render empty.
    keep_special: frozenset[int] = frozenset()
    #: Grammar the output must follow (one request's state: a request is submitted once).
    constraint: TokenConstraint | None = field(default=None, compare=False)
    #: Report the ``n_probs`` most likely tokens (and the chosen one's log-probability) at each step.
    n_probs: int = 0
    #: Report the probabilities the sampler chain leaves (llama-server's ``post_sampling_probs``), not the model's.
    post_sampling_probs: bool = False
    #: Most tokens drafted per step for this request (None: the server's; 0: no speculation).
    draft_max: int | None = None
    #: Report the prefill as it goes: an output with ``progress`` when it starts and after each prompt chunk.
    return_progress: bool = False
    #: How many tokens the model may think for, and how thinking is written (None: as long as it likes).
    thinking_budget: ThinkingBudget | None = None
    #: LoRA adapters as ``(id, scale)`` pairs, the others at 0 (None or empty: the server's scales).
    lora: tuple[tuple[int, float], ...] | None = None
    #: A context shift keeps this many prompt tokens after the BOS (-1: the whole prompt) and drops ``n_discard``
    #: of those after them (0: half).
    n_keep: int = 0
    n_discard: int = 0


class ReasoningControl:
    """The switch of a running generation's thinking (llama-server's ``reasoning_control``): another thread asks
    for its end (``POST /v1/chat/completions/control``), and the engine thread, at the generation's next step,
    writes the end of the thinking as a spent budget does. A request asked while the model is not thinking is
    dropped, not kept for later, as llama-server's is. One flag, set by one thread and taken by the other."""

    __slots__ = ("_asked",)

    def __init__(self) -> None:
        self._asked = False

    def end(self) -> None:
        """Ask for the end of the thinking (any thread)."""
        self._asked = True

    def take(self) -> bool:
        """Whether an end was asked for since the last call (the engine thread, once a step)."""
        asked, self._asked = self._asked, False
        return asked


@dataclass(frozen=True, slots=True)
class ThinkingBudget:
    """A reasoning budget: once ``budget`` tokens of thinking are spent, ``forced`` (a message, then the tokens that
    end thinking) is written in place of sampling, and the answer follows."""

    budget: int
    #: The tokens that open thinking (``<think>``), and those that end it (``</think>``).
    start: tuple[int, ...]
    end: tuple[int, ...]
    #: Written before ``end`` when the budget ends the thinking (``--reasoning-budget-message``).
    message: tuple[int, ...] = ()
    #: The prompt itself opened the thinking (its template writes ``<think>`` for the model).
    starts_inside: bool = False
    #: Ends the thinking when asked, whatever is left of the budget (``reasoning_control``).
    control: ReasoningControl | None = None

    @property
    def forced(self) -> tuple[int, ...]:
        return self.message + self.end


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """A generated token's log-probability under the model, and the most likely alternatives."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass(slots=True)
class Timings:
    """llama-server's ``timings`` object, filled as the request runs."""

    cache_n: int = 0
    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    #: Tokens drafted and verified, and how many of them were kept (reported once something was drafted).
    draft_n: int = 0
    draft_n_accepted: int = 0

    def to_json(self) -> dict[str, Any]:
        drafts = {"draft_n": self.draft_n, "draft_n_accepted": self.draft_n_accepted} if self.draft_n else {}
        return drafts | {
            "cache_n": self.cache_n,
            "prompt_n": self.prompt_n,
            "prompt_ms": self.prompt_ms,
            "prompt_per_token_ms": self.prompt_ms / self.prompt_n if self.prompt_n else 0.0,
            "prompt_per_second": 1e3 * self.prompt_n / self.prompt_ms if self.prompt_ms > 0 else 0.0,
            "predicted_n": self.predicted_n,
            "predicted_ms": self.predicted_ms,
            "predicted_per_token_ms": self.predicted_ms / self.n_predicted_steps if self.n_predicted_steps else 0.0,
            "predicted_per_second": 1e3 * self.n_predicted_steps / self.predicted_ms if self.predicted_ms > 0 else 0.0,
        }

    @property
    def n_predicted_steps(self) -> int:
        """Decode steps the generation took: the first token comes with the prompt's last batch, for free, so
        the rates count from it (``predicted_ms`` runs from the first token to the last, as llama-server's)."""
        return max(self.predicted_n - 1, 0)


@dataclass(frozen=True, slots=True)
class PromptProgress:
    """How far a prompt's prefill is (llama-server's ``prompt_progress``): positions in all, reused from the
    cache, and in the slot's memory now (the reused ones included)."""

    total: int
    cache: int
    processed: int
    time_ms: float

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "cache": self.cache, "processed": self.processed, "time_ms": self.time_ms}


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOutput:
    """One step of one request: new text and tokens; the last one carries ``finish_reason``."""

    text: str
    token_ids: tuple[int, ...]
    id_slot: int
    n_prompt_tokens: int
    n_cached_tokens: int
    n_decoded: int
    timings: Timings
    finish_reason: FinishReason | None = None
    stop_type: StopType | None = None
    stopping_word: str = ""
    #: The slot's context ran out: generation stopped there, or (``--context-shift``) older tokens were dropped.
    truncated: bool = False
    #: One entry per token in ``token_ids`` when the request asked for probabilities.
    logprobs: tuple[TokenLogprob, ...] = ()
    #: Set on the prefill's reports (``return_progress``), which carry no text.
    progress: PromptProgress | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True, slots=True)
class SlotTask:
    """The request a slot runs, or ran last, and its progress, as ``/slots`` shows them.

    Once it has finished, its counters read zero: llama-server resets them when the slot is released.
    """

    id_task: int
    request: EngineRequest
    running: bool = False
    n_prompt_processed: int = 0
    n_prompt_cached: int = 0
    n_decoded: int = 0
    has_new_line: bool = False

    @property
    def n_remain(self) -> int:
        """Tokens left to generate; -1 without a limit or a running request (llama-server's ``n_remain``)."""
        return self.request.max_tokens - self.n_decoded if self.running and self.request.max_tokens >= 0 else -1


#: How an input's token embeddings become its vector (``--pooling``); ``none`` keeps a row per token.
Pooling = Literal["none", "mean", "cls", "last", "rank"]


@dataclass(frozen=True, slots=True)
class KvCacheOptions:
    """How the KV cache is kept (``-fa``, ``-ctk``, ``-ctv``, ``--swa-full``); the defaults are llama-server's
    (a window-sized cache for sliding-window layers: checkpoints make it reusable)."""

    flash_attn: Literal["auto", "on", "off"] = "auto"
    type_k: str = "f16"
    type_v: str = "f16"
    swa_full: bool = False
    #: ``-kvo`` / ``-nkvo``: the KV cache, and the attention over it, on the device that holds its layer.
    offload_kqv: bool = True
    #: ``--op-offload`` / ``--no-op-offload``: operations on host-held weights may run on a device.
    op_offload: bool = True


#: How a model is split across GPUs (``-sm``).
SplitMode = Literal["none", "layer", "row", "tensor"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Where a model's weights go (``-ngl``, ``-sm``, ``-mg``, ``-ts``, ``-dev``, ``-ot`` and its shortcuts,
    ``--no-host``), in llama.cpp's terms: what :func:`lfmserve.llama.devices.place` writes into its
    ``llama_model_params``. The defaults are llama-server's."""

    #: Most layers in VRAM: -1 auto, -2 all (llama.cpp takes any negative number as all).
    n_gpu_layers: int = -1
    split_mode: SplitMode = "layer"
    main_gpu: int = 0
    #: Each GPU's proportion of the model (empty: by free memory).
    tensor_split: tuple[float, ...] = ()
    #: Device names (``CUDA0``); None: every GPU llama.cpp finds; empty: none (``-dev none``).
    devices: tuple[str, ...] | None = None
    #: (tensor name pattern, buffer type name), the first pattern a tensor's name matches winning.
    overrides: tuple[tuple[str, str], ...] = ()
    no_host: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RopeOptions:
    """RoPE and YaRN settings of the context (``--rope-*``, ``--yarn-*``); the defaults are llama.cpp's "the model's
    own" values (0 for the base, scale and original context, -1 for the YaRN factors, None for the scaling)."""

    scaling: Literal["none", "linear", "yarn"] | None = None
    freq_base: float = 0.0
    freq_scale: float = 0.0
    yarn_orig_ctx: int = 0
    yarn_ext_factor: float = -1.0
    yarn_attn_factor: float = -1.0
    yarn_beta_slow: float = -1.0
    yarn_beta_fast: float = -1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuPlacement:
    """Where one threadpool's threads run and how they wait (``-C`` / ``-Cr``, ``--cpu-strict``, ``--prio``,
    ``--poll``, or a batch or draft form of them); the defaults are ggml's: any CPU, normal priority, polling 50."""

    #: The CPUs its threads may run on (empty: any, the inherited affinity).
    cpus: tuple[int, ...] = ()
    #: Each thread on its own CPU of ``cpus``, in turn (ggml's ``strict_cpu``).
    strict: bool = False
    #: -1 low, 0 normal, 1 medium, 2 high, 3 realtime (ggml's ``enum ggml_sched_priority``).
    prio: int = 0
    #: 0 no polling ... 100 mostly polling, while waiting for work.
    poll: int = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadPlacement:
    """``--numa`` and each threadpool's placement: the context's, for generation and for batches, and the draft
    model's (``draft-simple``). All defaults: ggml's own pools, as without the flags."""

    numa: Literal["distribute", "isolate", "numactl"] | None = None
    generation: CpuPlacement = field(default_factory=CpuPlacement)
    batch: CpuPlacement = field(default_factory=CpuPlacement)
    draft: CpuPlacement = field(default_factory=CpuPlacement)
    draft_batch: CpuPlacement = field(default_factory=CpuPlacement)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """How the engine is built: the context and its slots, the caches, and the optional second context and drafts.

    The loader builds it from the server's settings (tests build it directly). It is frozen because the
    engine and its parts only read it: one config describes an engine for its whole life.
    """

    n_ctx: int = 0
    n_slots: int = 1
    n_batch: int = 2048
    n_ubatch: int = 512
    n_threads: int = 1
    n_threads_batch: int | None = None
    #: ``--numa``, ``-C``, ``--prio`` and the rest: where the threads run (default: ggml's placement).
    threads: ThreadPlacement = field(default_factory=ThreadPlacement)
    #: Decode on fewer threads while that is faster (another process busy on a core): :mod:`.threads`.
    adaptive_threads: bool = True
    #: Idle slot chosen when its cache shares more than this fraction of the prompt (llama-server's 0.10).
    slot_similarity: float = 0.10
    #: Requests waiting for a slot beyond this answer 503.
    max_queue: int = 1024
    #: Checkpoints kept per slot, by count and by bytes.
    max_checkpoints: int = 32
    max_checkpoint_bytes: int = 256 * 2**20
    #: Host RAM for sequences evicted from slots (0 = off).
    cache_ram_bytes: int = 8192 * 2**20
    #: ``--cache-disk``: where the RAM cache's entries are also written, to be found again after a restart.
    cache_disk: str | None = None
    cache_disk_bytes: int = 8192 * 2**20
    #: ``--cache-reuse``: shortest cached run moved by KV shifting (0 = off; attention-only models).
    cache_reuse: int = 0
    #: ``--cache-idle-slots``: when a request starts, idle slots move to the RAM cache and leave the KV cache.
    cache_idle_slots: bool = True
    #: ``--context-shift``: a generation that fills its slot drops the older half of it and goes on
    #: (attention-only models without a projector; otherwise it stops there, truncated).
    context_shift: bool = False
    #: ``--media-cache``: bytes of projector output kept for media seen before (0 = off).
    media_cache_bytes: int = 256 * 2**20
    #: ``--embeddings``: a second context that embeds inputs, pooled as ``pooling`` says (None: the model's).
    embeddings: bool = False
    pooling: Pooling | None = None
    #: Inputs one embedding decode takes at most (each its own sequence).
    embedding_sequences: int = 64
    #: ``--spec-type`` and its sizes: drafts verified in each step's batch (off by default).
    speculation: SpeculationConfig = field(default_factory=SpeculationConfig)
    #: ``-fa``, ``-ctk``, ``-ctv``, ``--swa-full``.
    kv: KvCacheOptions = field(default_factory=KvCacheOptions)
    rope: RopeOptions = field(default_factory=RopeOptions)
    #: ``--kv-unified``: each slot may fill the whole context, which they share (default: a share each).
    shared_context: bool = False
    #: ``--kv-unified-per-slot``: the most tokens one slot may use (0: its share of the context).
    slot_cap: int = 0
    #: ``--lora`` / ``--lora-scaled``: LoRA adapter files and their starting scales.
    lora: tuple[tuple[str, float], ...] = ()
    #: ``--control-vector`` / ``--control-vector-scaled``: control vector files and their scales (summed).
    control_vectors: tuple[tuple[str, float], ...] = ()
    #: ``--control-vector-layer-range``: the first and last layer they are added to (None: 1 to the last).
    control_vector_layers: tuple[int, int] | None = None
    #: ``--warmup``: decode BOS and EOS once before serving.
    warmup: bool = True
    #: ``-ngld``, ``-devd``, ``-otd`` and its shortcuts, with the rest of the target's: the draft model's weights.
    draft_placement: Placement = field(default_factory=Placement)

    def context_sizes(self, n_ctx_train: int) -> ContextSizes:
        """The context this engine asks llama.cpp for, and each slot's, for a model trained on ``n_ctx_train``."""
        return context_sizes(
            self.n_ctx, self.n_slots, n_ctx_train=n_ctx_train, shared=self.shared_context, slot_cap=self.slot_cap
        )


#: llama.cpp rounds the context, and each slot's share of it, up to a multiple of this (``llama-context.cpp``).
CONTEXT_PADDING = 256


@dataclass(frozen=True, slots=True)
class ContextSizes:
    """The tokens of the whole context (what the KV cache holds) and of one slot (what one request may use)."""

    n_ctx: int
    n_ctx_slot: int


def context_sizes(
    n_ctx: int, n_slots: int, *, n_ctx_train: int, shared: bool = False, slot_cap: int = 0
) -> ContextSizes:
    """llama-server's sizes for ``-c n_ctx -np n_slots``, computed rather than read from a context so that the
    router can report a model's ``n_ctx`` before any child loads it, and report what the child will.

    ``n_ctx`` 0 is the model's training context. llama.cpp pads the context to a multiple of 256; unless the slots
    share it (``--kv-unified``) it pads each slot's share too and grows the context to hold every share
    (``llama_context``'s constructor: ``-c 4096 -np 3`` is 1536 a slot, a 4608-token context). llama-server then
    caps a slot at ``slot_cap`` (``--kv-unified-per-slot``, 0: none) and at the training context
    (``server_context``'s ``n_ctx_slot()``); ``n_ctx_train`` 0 (a header not read) caps nothing.
    """
    total = _padded(n_ctx or n_ctx_train)
    slots = max(n_slots, 1)
    share = total if shared else _padded(total // slots)
    caps = [cap for cap in (slot_cap, n_ctx_train) if cap > 0]
    return ContextSizes(n_ctx=total if shared else share * slots, n_ctx_slot=min([share, *caps]))


def _padded(n_tokens: int) -> int:
    return -(-n_tokens // CONTEXT_PADDING) * CONTEXT_PADDING


@dataclass(slots=True)
class EngineStats:
    """Counters since start, for /metrics and /slots (written by the engine thread only; the ``--cache-disk``
    writer's own by that writer).

    The prompt and generation counters mean what llama-server's do: prompt tokens decoded (cached ones
    apart) and the time of the decodes that held them; generated tokens, the decode steps they took (the
    first token of each request costs none) and the time from each request's first token to its last.
    """

    #: When the engine started (Unix seconds): /metrics' ``Process-Start-Time-Unix``.
    t_start: float = field(default_factory=time.time)
    n_prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    n_predicted_tokens: int = 0
    n_predicted_steps: int = 0
    predicted_seconds: float = 0.0
    #: Decodes of token batches, generation's and embeddings' (as llama-server's, not media rows or drafts).
    n_decode_calls: int = 0
    #: Busy slots summed over those decodes.
    n_busy_slots_sum: int = 0
    #: The longest sequence a slot has held at a decode (prompt and generation).
    n_tokens_max: int = 0
    n_requests: int = 0
    n_requests_deferred: int = 0
    n_cache_hits: int = 0
    n_cached_tokens: int = 0
    n_checkpoints_saved: int = 0
    n_checkpoints_restored: int = 0
    n_slot_copies: int = 0
    n_ram_saves: int = 0
    n_ram_restores: int = 0
    #: ``--cache-disk``: entries written, dropped because the writer was behind, and lost to an error.
    n_disk_cache_writes: int = 0
    n_disk_cache_drops: int = 0
    n_disk_cache_errors: int = 0
    n_shifted_tokens: int = 0
    #: ``--context-shift``: times a full slot dropped its older half.
    n_context_shifts: int = 0
    n_media_encodes: int = 0
    n_media_cache_hits: int = 0
    n_drafts: int = 0
    n_draft_tokens: int = 0
    n_draft_tokens_accepted: int = 0
    media_encode_seconds: float = 0.0
    #: Per finished generation: time to first token, latency, queue time, prompt and generated tokens.
    requests: RequestHistograms = field(default_factory=RequestHistograms)
