"""The groups of :class:`~lfmserve.settings.Settings`: one frozen record per concern, each field with its flags.

A group is what one part of the server needs: the loader reads :class:`SourceSettings` to find the files, the
engine is built from :class:`EngineSettings`, the HTTP layer reads :class:`ServerSettings`, and so on. Each
group's ``TITLE`` is its ``--help`` section. Field names are unique across the groups: a field's name is also its
environment variable (``LFMSERVE_<NAME>``) and its keyword in :meth:`Settings.of
<lfmserve.settings.Settings.of>`.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..c_numbers import leading_float
from .fields import (
    KV_CACHE_TYPES,
    OnOffAction,
    ShortcutAction,
    flag,
    flag_spec,
    parse_count,
    parse_size,
    switch,
)
from .placement import ContextSizeAction, DeviceSettings, ThreadSettings
from .sampler_flags import (
    OneGrammar,
    StoreGiven,
    breakers_argv,
    dry_base,
    finite_float,
    fold_breakers,
    int_at_least,
    json_schema,
    json_schema_file,
    logit_bias,
    logit_bias_argv,
    read_text,
    sampler_codes,
    sampler_names,
    samplers_argv,
)
from .weights import WeightSettings


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceSettings:
    """Which model is served, where it comes from, and the names clients see it by."""

    TITLE: ClassVar[str] = "model source"

    model: str | None = field(default=None, metadata=flag("-m", "--model", help="path to a GGUF model file"))
    hf_repo: str | None = field(
        default=None,
        metadata=flag(
            "-hf",
            "-hfr",
            "--hf-repo",
            help="Hugging Face repo[:quant] to download the GGUF from (default quant Q4_K_M; with neither -m nor -hf, "
            "lfmserve is a router: see the router section)",
        ),
    )
    hf_file: str | None = field(
        default=None, metadata=flag("-hff", "--hf-file", help="file in the -hf repo (overrides the quant)")
    )
    offline: bool = switch(
        "--offline", help="use only the Hugging Face cache: no network (-hf, -hfd)", default=False, action="store_true"
    )
    hf_token: str | None = field(
        default=None,
        repr=False,
        metadata=flag(
            "-hft",
            "--hf-token",
            help="Hugging Face access token for gated and private repos (-hf, -hfd)",
            environment=("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"),
            secret=True,
        ),
    )
    mmproj: str | None = field(
        default=None, metadata=flag("-mm", "--mmproj", help="multimodal projector GGUF (images, audio)")
    )
    mmproj_auto: bool = switch(
        "--mmproj-auto",
        "--no-mmproj",
        "--no-mmproj-auto",
        help="with -hf, also fetch the repo's projector when it has one (default; --no-mmproj: text only)",
        default=True,
        action=OnOffAction,
    )
    alias: str | None = field(
        default=None,
        metadata=flag(
            "-a",
            "--alias",
            help="model names for the API, comma-separated; the id is the first in sorted order (default: file name)",
        ),
    )
    tags: str | None = field(
        default=None, metadata=flag("--tags", help="model tags, comma-separated (shown by /v1/models)")
    )
    lora: tuple[str, ...] = field(
        default=(),
        metadata=flag("--lora", help="LoRA adapter GGUF at scale 1 (repeatable, or comma-separated)", action="append"),
    )
    lora_scaled: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "--lora-scaled",
            help="LoRA adapter GGUF at a scale: FILE:SCALE (comma-separated), or FILE SCALE (repeatable)",
            action="append",
        ),
    )
    lora_init_without_apply: bool = switch(
        "--lora-init-without-apply",
        help="load the LoRA adapters at scale 0 (set their scales with POST /lora-adapters or per request)",
        default=False,
        action="store_true",
    )

    @property
    def aliases(self) -> tuple[str, ...]:
        """``--alias``'s names, sorted and without repeats (llama-server keeps them in a ``std::set``)."""
        return _comma_set(self.alias)

    @property
    def tag_list(self) -> tuple[str, ...]:
        return _comma_set(self.tags)

    @property
    def lora_adapters(self) -> tuple[tuple[str, float], ...]:
        """Each adapter file and its starting scale: ``--lora`` ones first, then ``--lora-scaled`` ones (0 with
        ``--lora-init-without-apply``). Raises ValueError for a ``--lora-scaled`` entry without a number."""
        adapters = [(path, 1.0) for value in self.lora for path in _comma_list(value)]
        for value in self.lora_scaled:
            for item in _comma_list(value):
                path, _, scale = item.rpartition(":")
                try:
                    adapters.append((path, float(scale)))
                except ValueError:
                    raise ValueError(f"--lora-scaled {item!r}: expected FILE:SCALE") from None
                if not path:
                    raise ValueError(f"--lora-scaled {item!r}: expected FILE:SCALE")
        if self.lora_init_without_apply:
            return tuple((path, 0.0) for path, _ in adapters)
        return tuple(adapters)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatSettings:
    """How a chat becomes a prompt: the template, and where the model's thinking goes."""

    TITLE: ClassVar[str] = "chat template and reasoning"

    jinja: bool = switch(
        "--jinja",
        help="render the GGUF's Jinja chat template (default; --no-jinja uses llama.cpp's built-in formats)",
        default=True,
    )
    chat_template_file: str | None = field(
        default=None, metadata=flag("--chat-template-file", help="Jinja chat template file overriding the GGUF's")
    )
    chat_template: str | None = field(
        default=None,
        metadata=flag(
            "--chat-template",
            help="chat template: one of llama.cpp's built-in names (chatml, llama3, gemma...) or Jinja source",
        ),
    )
    reasoning_format: str = field(
        default="auto",
        metadata=flag(
            "--reasoning-format",
            help="where <think> text goes: auto/deepseek = reasoning_content, none = left in content, "
            "nothink = reasoning off",
            choices=("auto", "deepseek", "deepseek-legacy", "none", "nothink"),
        ),
    )
    reasoning: str = field(
        default="auto",
        metadata=flag(
            "-rea",
            "--reasoning",
            help="reasoning in the chat: on, off (the template is told enable_thinking=false) or auto",
            choices=("on", "off", "auto"),
        ),
    )
    reasoning_budget: int = field(
        default=-1,
        metadata=flag(
            "--reasoning-budget", help="thinking tokens allowed (-1 = unrestricted, 0 = end thinking at once)", type=int
        ),
    )
    reasoning_budget_message: str = field(
        default="",
        metadata=flag(
            "--reasoning-budget-message",
            help="text written before the end of thinking when the reasoning budget ends it",
        ),
    )
    chat_template_kwargs: str | None = field(
        default=None,
        metadata=flag(
            "--chat-template-kwargs",
            help="JSON object of template variables every request gets under its own chat_template_kwargs, "
            "e.g. '{\"keep_past_thinking\": true}'",
        ),
    )
    reasoning_effort: str = field(
        default="default",
        metadata=flag(
            "--reasoning-effort",
            help="the template's reasoning_effort unless a request sets one: default (the template's own), or a "
            "level such as minimal, low, medium, high, xhigh or max",
        ),
    )
    reasoning_preserve: bool | None = switch(
        "--reasoning-preserve",
        help="tell the template to keep the reasoning of every past assistant turn, not only the last "
        "(preserve_reasoning; default: unset, the template's own choice, as its authors render it)",
        default=None,
    )
    skip_chat_parsing: bool = switch(
        "--skip-chat-parsing",
        help="return the model's output as content, unparsed: reasoning and tool calls included",
        default=False,
    )
    system_prompt_file: str | None = field(
        default=None,
        metadata=flag(
            "--system-prompt-file",
            help="file whose text is the system message of every chat that starts without one (read at start; "
            "Ollama's SYSTEM)",
            metavar="FNAME",
        ),
    )
    chat_messages_file: str | None = field(
        default=None,
        metadata=flag(
            "--chat-messages-file",
            help="JSON file of the messages put before every chat's own, a list of {role, content} objects (read "
            "at start; Ollama's MESSAGE lines)",
            metavar="FNAME",
        ),
    )
    prefill_assistant: bool = switch(
        "--prefill-assistant",
        help="continue a chat's final assistant message (default; --no-prefill-assistant closes it and starts a "
        "new assistant turn)",
        default=True,
    )

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """``--chat-template-kwargs`` as a mapping; ValueError (a startup error) unless it is a JSON object, and
        for an ``enable_thinking`` that is not a boolean (which every request would fail on, as in llama-server)."""
        if not self.chat_template_kwargs:
            return {}
        try:
            kwargs = json.loads(self.chat_template_kwargs)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--chat-template-kwargs is not valid JSON: {exc}") from None
        if not isinstance(kwargs, dict):
            raise ValueError(f"--chat-template-kwargs {self.chat_template_kwargs!r}: expected a JSON object")
        if not isinstance(kwargs.get("enable_thinking", False), bool):
            raise ValueError("--chat-template-kwargs: 'enable_thinking' must be true or false")
        return kwargs

    @property
    def template_variables(self) -> dict[str, Any]:
        """What every render gets under a request's own ``chat_template_kwargs`` (llama-server's
        ``default_template_kwargs``): ``--chat-template-kwargs``, then ``--reasoning-effort`` and
        ``--reasoning-preserve``. Unlike llama-server, ``preserve_reasoning`` is left unset when neither sets it:
        LFM2.5-8B-A1B's template would keep every past turn's thinking, which its authors' render drops."""
        variables = self.template_kwargs
        if self.reasoning_effort != "default":
            variables["reasoning_effort"] = self.reasoning_effort
        if self.reasoning_preserve is not None:
            variables["preserve_reasoning"] = self.reasoning_preserve
        return variables


@dataclass(frozen=True, slots=True, kw_only=True)
class MediaSettings:
    """How media parts are fetched, decoded and encoded, and how much encoder output is kept."""

    TITLE: ClassVar[str] = "images and audio"

    mmproj_offload: bool = switch(
        "--mmproj-offload",
        help="run the projector on a GPU when there is one (--no-mmproj-offload: on the CPU)",
        default=True,
    )
    image_min_tokens: int = field(
        default=-1,
        metadata=flag("--image-min-tokens", help="fewest tokens an image takes (-1 = the projector's)", type=int),
    )
    image_max_tokens: int = field(
        default=-1,
        metadata=flag("--image-max-tokens", help="most tokens an image takes (-1 = the projector's)", type=int),
    )
    media_path: str | None = field(
        default=None, metadata=flag("--media-path", help="folder that file:// media URLs are read from")
    )
    media_fetch: bool = switch(
        "--media-fetch",
        help="fetch http(s):// media URLs (default; --no-media-fetch refuses them)",
        default=True,
    )
    media_fetch_private: bool = switch(
        "--media-fetch-private",
        help="allow media URLs whose host is a loopback, private or link-local address",
        default=False,
        action="store_true",
    )
    media_encode_beside: bool = switch(
        "--media-encode-beside",
        help="encode media on half the cores while other streams keep generating (default; holds the "
        "projector twice; --no-media-encode-beside: streams wait for each encode, as in llama-server)",
        default=True,
    )
    media_cache: int = field(
        default=256,
        metadata=flag("--media-cache", help="MiB of projector output kept for media seen before (0 = off)", type=int),
    )
    video_fps: float = field(
        default=4.0,
        metadata=flag(
            "--video-fps", help="frames per second taken from a video (0 = the video's own rate)", type=finite_float
        ),
    )
    video_timestamp_interval: int = field(
        default=5000,
        metadata=flag(
            "--video-timestamp-interval",
            help="milliseconds between the timestamps written between a video's frames (0 = none)",
            type=int,
        ),
    )
    video_ffmpeg_dir: str | None = field(
        default=None,
        metadata=flag(
            "--video-ffmpeg-dir", help="folder holding the ffmpeg and ffprobe that read videos (default: PATH)"
        ),
    )
    video_decodes: int = field(
        default=0,
        metadata=flag(
            "--video-decodes",
            help="videos decoded at once, each up to 512 MiB of frames; more wait (0 = half the cores, at least 1)",
            type=int,
        ),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbeddingSettings:
    """Whether the embedding routes are served, and how a text's token vectors become one."""

    TITLE: ClassVar[str] = "embeddings and reranking"

    embeddings: bool = switch(
        "--embedding",
        "--embeddings",
        help="also serve /v1/embeddings and /embedding (a second context; chat and completions keep working)",
        default=False,
        action="store_true",
    )
    reranking: bool = switch(
        "--rerank",
        "--reranking",
        help="also serve /rerank and /v1/rerank (embeddings with rank pooling; the model needs a classifier head)",
        default=False,
        action="store_true",
    )
    pooling: str | None = field(
        default=None,
        metadata=flag(
            "--pooling",
            help="how a text's token embeddings become one vector (default: the model's)",
            choices=("none", "mean", "cls", "last", "rank"),
        ),
    )
    embd_normalize: int = field(
        default=2,
        metadata=flag(
            "--embd-normalize",
            help="embedding normalisation: 2 Euclidean (default), -1 none, 0 max-abs to int16, 1 taxicab, p > 2 p-norm",
            type=int,
        ),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSettings:
    """What the engine holds and how it batches: context, slots, threads, KV cache, prompt cache."""

    TITLE: ClassVar[str] = "context, batching and prompt cache"

    ctx_size: int = field(
        default=0,
        metadata=flag(
            "-c",
            "--ctx-size",
            help="context size in tokens (0 = the model's, which --fit may not shrink; not given: the model's, fitted)",
            type=int,
            action=ContextSizeAction,
        ),
    )
    parallel: int = field(
        default=4,
        metadata=flag(
            "-np",
            "--parallel",
            help="number of slots; each gets --ctx-size / N tokens, rounded up to a multiple of 256 (at most the "
            "training context)",
            type=int,
        ),
    )
    batch_size: int = field(default=2048, metadata=flag("-b", "--batch-size", help="logical batch size", type=int))
    ubatch_size: int = field(default=512, metadata=flag("-ub", "--ubatch-size", help="physical batch size", type=int))
    flash_attn: str = field(
        default="auto",
        metadata=flag("-fa", "--flash-attn", help="flash attention: on, off or auto", choices=("on", "off", "auto")),
    )
    cache_type_k: str = field(
        default="f16",
        metadata=flag("-ctk", "--cache-type-k", help="KV cache type for K", choices=KV_CACHE_TYPES),
    )
    cache_type_v: str = field(
        default="f16",
        metadata=flag(
            "-ctv",
            "--cache-type-v",
            help="KV cache type for V (quantized needs flash attention)",
            choices=KV_CACHE_TYPES,
        ),
    )
    control_vector: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "--control-vector",
            help="control vector GGUF added at scale 1 (comma-separated, repeatable)",
            action="append",
            metavar="FNAME",
        ),
    )
    control_vector_scaled: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "--control-vector-scaled",
            help="control vector GGUF added at a scale: FNAME:SCALE (comma-separated, repeatable)",
            action="append",
            metavar="FNAME:SCALE,...",
        ),
    )
    control_vector_layer_range: tuple[int, int] | None = field(
        default=None,
        metadata=flag(
            "--control-vector-layer-range",
            help="layers the control vectors are added to, START and END included (default: 1 to the last)",
            nargs=2,
            type=int,
            metavar=("START", "END"),
        ),
    )
    rope_scaling: str | None = field(
        default=None,
        metadata=flag(
            "--rope-scaling",
            help="RoPE frequency scaling: none, linear or yarn (default: the model's)",
            choices=("none", "linear", "yarn"),
        ),
    )
    rope_scale: float | None = field(
        default=None,
        metadata=flag(
            "--rope-scale",
            help="RoPE context scaling factor: --rope-freq-scale 1/N (this one wins if both)",
            type=float,
        ),
    )
    rope_freq_base: float = field(
        default=0.0, metadata=flag("--rope-freq-base", help="RoPE base frequency (0 = the model's)", type=float)
    )
    rope_freq_scale: float = field(
        default=0.0,
        metadata=flag("--rope-freq-scale", help="RoPE frequency scaling factor (0 = the model's)", type=float),
    )
    yarn_orig_ctx: int = field(
        default=0, metadata=flag("--yarn-orig-ctx", help="YaRN: the model's original context (0 = its own)", type=int)
    )
    yarn_ext_factor: float = field(
        default=-1.0,
        metadata=flag("--yarn-ext-factor", help="YaRN: extrapolation mix factor (-1 = the model's)", type=float),
    )
    yarn_attn_factor: float = field(
        default=-1.0,
        metadata=flag("--yarn-attn-factor", help="YaRN: attention magnitude scale (-1 = the model's)", type=float),
    )
    yarn_beta_slow: float = field(
        default=-1.0, metadata=flag("--yarn-beta-slow", help="YaRN: high correction dim (-1 = the model's)", type=float)
    )
    yarn_beta_fast: float = field(
        default=-1.0, metadata=flag("--yarn-beta-fast", help="YaRN: low correction dim (-1 = the model's)", type=float)
    )
    swa_full: bool = switch(
        "--swa-full",
        help="full-size sliding-window cache (more memory, no re-processing)",
        default=False,
        action="store_true",
    )
    kv_unified: bool = switch(
        "-kvu",
        "--kv-unified",
        "-no-kvu",
        "--no-kv-unified",
        help="let any slot fill the whole context, which the slots share; when it runs out, every generation in the "
        "decode fails (default: each slot gets -c / -np)",
        default=False,
        action=OnOffAction,
    )
    kv_unified_per_slot: int = field(
        default=0,
        metadata=flag(
            "--kv-unified-per-slot",
            help="the most tokens one slot may use (0 = its share); without -c the context is -np times it",
            type=parse_count,
        ),
    )
    cont_batching: bool = switch(
        "-cb",
        "--cont-batching",
        "-nocb",
        "--no-cont-batching",
        help="continuous batching: always on in lfmserve (-nocb is accepted and has no effect)",
        default=True,
        action=OnOffAction,
    )
    context_shift: bool = switch(
        "--context-shift",
        help="when a generation fills its slot's context, drop the older half and go on (attention-only models)",
        default=False,
    )
    slot_prompt_similarity: float = field(
        default=0.10,
        metadata=flag(
            "-sps",
            "--slot-prompt-similarity",
            help="reuse an idle slot whose cache shares more than this fraction of the prompt",
            type=float,
        ),
    )
    max_queue: int = field(
        default=1024,
        metadata=flag("--max-queue", help="requests that may wait for a slot; more answer 503", type=int),
    )
    ctx_checkpoints: int = field(
        default=32,
        metadata=flag(
            "-ctxcp",
            "--ctx-checkpoints",
            "--swa-checkpoints",
            help="checkpoints of the recurrent / sliding-window state kept per slot",
            type=int,
        ),
    )
    cache_ram: int = field(
        default=8192,
        metadata=flag("-cram", "--cache-ram", help="MiB of host RAM for evicted prompt caches (0 = off)", type=int),
    )
    cache_disk: str | None = field(
        default=None,
        metadata=flag(
            "--cache-disk",
            help="folder where the RAM cache's prompts are also kept, to be found again after a restart (one "
            "subfolder per model and context: servers of several models may share it)",
        ),
    )
    cache_disk_size: int = field(
        default=8192,
        metadata=flag(
            "--cache-disk-size",
            help="MiB the whole --cache-disk folder may hold, every model's files together (oldest out first)",
            type=int,
        ),
    )
    cache_reuse: int = field(
        default=0,
        metadata=flag(
            "--cache-reuse",
            help="min chunk size to reuse from the cache by KV shifting (attention-only models; 0 = off)",
            type=int,
        ),
    )
    cache_prompt: bool = switch(
        "--cache-prompt",
        help="reuse the cached prefix of a prompt: the default of a request's cache_prompt",
        default=True,
    )
    cache_idle_slots: bool = switch(
        "--cache-idle-slots",
        help="keep an idle slot's prompt in the RAM cache (--cache-ram) when another request takes the slot",
        default=True,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculationSettings:
    """Speculative decoding: which drafters guess ahead and how far (llama-server's names and defaults)."""

    TITLE: ClassVar[str] = "speculative decoding"

    spec_type: str | None = field(
        default=None,
        metadata=flag(
            "--spec-type",
            help="speculative decoding, comma-separated: ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, "
            "ngram-cache (drafts from the request's own tokens), draft-simple (a draft model; default: none)",
        ),
    )
    spec_draft_model: str | None = field(
        default=None,
        metadata=flag("--spec-draft-model", "-md", "--model-draft", help="draft model GGUF (draft-simple)"),
    )
    spec_draft_hf: str | None = field(
        default=None,
        metadata=flag(
            "--spec-draft-hf", "-hfd", "-hfrd", "--hf-repo-draft", help="draft model from Hugging Face, repo[:quant]"
        ),
    )
    spec_draft_n_max: int = field(
        default=3,
        metadata=flag("--spec-draft-n-max", help="tokens the draft model guesses per step (draft-simple)", type=int),
    )
    spec_draft_n_min: int = field(
        default=0, metadata=flag("--spec-draft-n-min", help="shorter drafts are not verified", type=int)
    )
    spec_draft_p_min: float = field(
        default=0.0,
        metadata=flag(
            "--spec-draft-p-min",
            "--draft-p-min",
            help="the draft model stops guessing below this probability (draft-simple)",
            type=float,
        ),
    )
    spec_draft_threads: int | None = field(
        default=None,
        metadata=flag(
            "-td",
            "--threads-draft",
            "--spec-draft-threads",
            help="the draft model's threads for generation (default: --threads)",
            type=int,
        ),
    )
    spec_draft_threads_batch: int | None = field(
        default=None,
        metadata=flag(
            "-tbd",
            "--threads-batch-draft",
            "--spec-draft-threads-batch",
            help="the draft model's threads for prompt processing (default: --spec-draft-threads)",
            type=int,
        ),
    )
    spec_draft_type_k: str = field(
        default="f16",
        metadata=flag(
            "-ctkd",
            "--cache-type-k-draft",
            "--spec-draft-type-k",
            help="the draft model's KV cache type for K",
            choices=KV_CACHE_TYPES,
        ),
    )
    spec_draft_type_v: str = field(
        default="f16",
        metadata=flag(
            "-ctvd",
            "--cache-type-v-draft",
            "--spec-draft-type-v",
            help="the draft model's KV cache type for V",
            choices=KV_CACHE_TYPES,
        ),
    )
    spec_synth_len: float | None = field(
        default=None,
        metadata=flag(
            "--spec-synth-len",
            help="mean synthetic acceptance length, the target token included (drafts kept by chance: benchmarking)",
            type=float,
        ),
    )
    spec_synth_rates: str | None = field(
        default=None,
        metadata=flag(
            "--spec-synth-rates",
            help="comma-separated chances of keeping each draft position whatever the model says (benchmarking)",
        ),
    )
    spec_exact: bool = switch(
        "--spec-exact",
        "--no-spec-exact",
        help="verify drafts only in batches llama.cpp's kernels compute as they compute a token alone, so greedy "
        "output is the same with and without drafts; the size is measured at startup and said in one line (3 on "
        "CPUs that repack weights: drafts of 2 tokens at most, and speculation is off where no batch that small "
        "pays). Off (the default): drafts are verified in batches of any size, as llama-server verifies them: "
        "faster, and near ties can go either way",
        default=False,
        action=OnOffAction,
    )
    spec_default: bool = field(
        default=False,
        metadata=flag(
            "--spec-default",
            help="enable default speculative decoding config, as llama-server's: adds ngram-mod to --spec-type and "
            "sets its sizes to 24 / 48 / 64 where it stands (a --spec-ngram-mod-* flag after it wins, one before "
            "it is overridden)",
            action=ShortcutAction,
            sets={"spec_ngram_mod_n_match": 24, "spec_ngram_mod_n_min": 48, "spec_ngram_mod_n_max": 64},
        ),
    )
    spec_ngram_simple_size_n: int = field(
        default=12, metadata=flag("--spec-ngram-simple-size-n", help="tokens looked up (ngram-simple)", type=int)
    )
    spec_ngram_simple_size_m: int = field(
        default=48, metadata=flag("--spec-ngram-simple-size-m", help="most tokens drafted (ngram-simple)", type=int)
    )
    spec_ngram_simple_min_hits: int = field(
        default=1,
        metadata=flag("--spec-ngram-simple-min-hits", help="accepted as llama-server's (unused there too)", type=int),
    )
    spec_ngram_map_k_size_n: int = field(
        default=12, metadata=flag("--spec-ngram-map-k-size-n", help="tokens looked up (ngram-map-k)", type=int)
    )
    spec_ngram_map_k_size_m: int = field(
        default=48, metadata=flag("--spec-ngram-map-k-size-m", help="most tokens drafted (ngram-map-k)", type=int)
    )
    spec_ngram_map_k_min_hits: int = field(
        default=1, metadata=flag("--spec-ngram-map-k-min-hits", help="accepted as llama-server's", type=int)
    )
    spec_ngram_map_k4v_size_n: int = field(
        default=12, metadata=flag("--spec-ngram-map-k4v-size-n", help="tokens looked up (ngram-map-k4v)", type=int)
    )
    spec_ngram_map_k4v_size_m: int = field(
        default=48, metadata=flag("--spec-ngram-map-k4v-size-m", help="most tokens drafted (ngram-map-k4v)", type=int)
    )
    spec_ngram_map_k4v_min_hits: int = field(
        default=1,
        metadata=flag("--spec-ngram-map-k4v-min-hits", help="sightings of a key before it drafts", type=int),
    )
    spec_ngram_mod_n_match: int = field(
        default=24, metadata=flag("--spec-ngram-mod-n-match", help="tokens hashed (ngram-mod)", type=int)
    )
    spec_ngram_mod_n_min: int = field(
        default=48, metadata=flag("--spec-ngram-mod-n-min", help="shortest draft (ngram-mod)", type=int)
    )
    spec_ngram_mod_n_max: int = field(
        default=64, metadata=flag("--spec-ngram-mod-n-max", help="longest draft (ngram-mod)", type=int)
    )

    @property
    def synth_rate_values(self) -> tuple[float, ...]:
        """``--spec-synth-rates`` as numbers; raises ValueError naming a value that is not one."""
        values = []
        for part in (self.spec_synth_rates or "").split(","):
            if part.strip():
                try:
                    values.append(float(part))
                except ValueError:
                    raise ValueError(f"--spec-synth-rates: invalid value {part.strip()!r}") from None
        return tuple(values)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """The HTTP server: where it listens, who may call it, and which routes it opens."""

    TITLE: ClassVar[str] = "server"

    host: str = field(default="127.0.0.1", metadata=flag("--host", help="addresses to listen on, comma-separated"))
    port: int = field(default=8080, metadata=flag("--port", help="port to listen on", type=int))
    api_key: tuple[str, ...] = field(
        default=(),
        repr=False,
        metadata=flag(
            "--api-key",
            help="API key clients must send (repeatable, or comma-separated)",
            action="append",
            environment=("LLAMA_API_KEY",),
            secret=True,
        ),
    )
    api_key_file: str | None = field(
        default=None,
        repr=False,
        metadata=flag(
            "--api-key-file",
            help="file with one API key per line",
            environment=("LLAMA_ARG_API_KEY_FILE",),
            secret=True,
        ),
    )
    cors_origins: str = field(
        default="*",
        metadata=flag(
            "--cors-origins",
            help="origins allowed by CORS, comma-separated, * in one any characters (http://localhost:*); 'localhost' "
            "allows only local pages (default: *)",
        ),
    )
    cors_methods: str = field(
        default="GET, POST, DELETE, OPTIONS",
        metadata=flag("--cors-methods", help="methods a CORS preflight allows, comma-separated"),
    )
    cors_headers: str = field(
        default="*", metadata=flag("--cors-headers", help="request headers a CORS preflight allows, comma-separated")
    )
    cors_credentials: bool = switch(
        "--cors-credentials",
        help="allow credentials (cookies, Authorization) across origins; with --cors-origins * the request's Origin "
        "is echoed, since * cannot carry credentials (default; --no-cors-credentials answers * itself)",
        default=True,
    )
    api_prefix: str = field(
        default="",
        metadata=flag(
            "--api-prefix",
            help="path prefix every route and the web UI are served under, without the trailing slash "
            "(/llm: /llm/v1/chat/completions, /llm/health, the UI at /llm/); other paths answer 404",
        ),
    )
    ssl_cert_file: str | None = field(
        default=None, metadata=flag("--ssl-cert-file", help="PEM certificate: serve HTTPS (with --ssl-key-file)")
    )
    ssl_key_file: str | None = field(
        default=None,
        repr=False,
        metadata=flag("--ssl-key-file", help="PEM private key of --ssl-cert-file", secret=True),
    )
    reuse_port: bool = switch(
        "--reuse-port",
        help="bind with SO_REUSEPORT, so several servers can listen on the same port (the kernel spreads the "
        "connections)",
        default=False,
        action="store_true",
    )
    sse_ping_interval: int = field(
        default=30,
        metadata=flag(
            "--sse-ping-interval",
            help="seconds a stream may stay silent before a ':' comment line keeps it alive (0 or -1 = never)",
            type=int,
        ),
    )
    max_body_bytes: int = field(
        default=64 * 2**20,
        metadata=flag(
            "--max-body-bytes",
            help="largest request body accepted, in bytes (default 64 MiB: a few large images); more answers 413",
            type=int,
        ),
    )
    shutdown_timeout: float = field(
        default=10.0,
        metadata=flag(
            "--shutdown-timeout",
            help="seconds running requests may take to finish on SIGTERM / Ctrl-C; the rest then end with a 503",
            type=float,
        ),
    )
    sleep_idle_seconds: int = field(
        default=-1,
        metadata=flag(
            "--sleep-idle-seconds",
            help="unload the model after this many idle seconds, reload it on the next request (-1 = never)",
            type=int,
        ),
    )
    ui: bool = switch(
        "--ui",
        "--webui",
        "--no-ui",
        "--no-webui",
        help="serve the web UI at / (default; --no-ui answers 404 there)",
        default=True,
        action=OnOffAction,
    )
    ui_config: str | None = field(
        default=None,
        metadata=flag(
            "--ui-config",
            "--webui-config",
            help="JSON object of the web UI's default settings, sent as /props ui_settings (wins over "
            "--ui-config-file)",
        ),
    )
    ui_config_file: str | None = field(
        default=None,
        metadata=flag("--ui-config-file", "--webui-config-file", help="file holding --ui-config's JSON object"),
    )
    props: bool = switch(
        "--props", help="allow changing server properties with POST /props", default=False, action="store_true"
    )
    slots_endpoint: bool = switch("--slots", help="expose GET /slots (default; --no-slots answers 501)", default=True)
    slot_save_path: str | None = field(
        default=None, metadata=flag("--slot-save-path", help="folder for POST /slots/{id}?action=save|restore")
    )
    metrics: bool = switch("--metrics", help="expose GET /metrics (Prometheus)", default=False, action="store_true")
    trace_requests: str | None = field(
        default=None,
        metadata=flag(
            "--trace-requests",
            help="append each generation request's shape (route key, hashes and lengths of its message prefixes, "
            "max_tokens; never its text) to this JSONL file, for bench/replay_trace.py",
        ),
    )
    threads_http: int = field(
        default=-1,
        metadata=flag(
            "--threads-http", help="accepted for llama-server's scripts (requests are served by asyncio)", type=int
        ),
    )
    timeout: int = field(
        default=3600,
        metadata=flag(
            "-to",
            "--timeout",
            help="accepted for llama-server's scripts, where it is the socket read/write timeout; uvicorn has none "
            "(a connection idle between requests closes after 5 s, as in llama-server)",
            type=int,
        ),
    )
    verbose: bool = switch(
        "-v",
        "--verbose",
        "--log-verbose",
        help="log everything, whatever -lv says: per-step detail, llama.cpp's own log, each request's access line",
        default=False,
        action="store_true",
    )
    show_version: bool = switch(
        "--version",
        help="print lfmserve's version and the llama.cpp build it runs, then exit",
        default=False,
        action="store_true",
    )
    cache_list: bool = switch(
        "-cl",
        "--cache-list",
        help="list the models in the Hugging Face cache (as -hf names them), then exit",
        default=False,
        action="store_true",
    )

    #: What --api-key-file and --ui-config(-file) hold, read once, when the settings are made
    #: (:meth:`__post_init__`).
    _file_keys: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)
    _ui_settings: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Read the key file and the web UI's defaults now: a missing file or one that is not a JSON object is the
        parse's one error line (ValueError naming the flag), before anything loads, and each is read once."""
        if self.api_key_file:
            keys = _read_text(f"--api-key-file {self.api_key_file}", self.api_key_file).splitlines()
            object.__setattr__(self, "_file_keys", tuple(keys))
        if self.ui_config is not None:
            object.__setattr__(self, "_ui_settings", _json_object("--ui-config", self.ui_config))
        elif self.ui_config_file is not None:
            name = f"--ui-config-file {self.ui_config_file}"
            object.__setattr__(self, "_ui_settings", _json_object(name, _read_text(name, self.ui_config_file)))

    @property
    def api_keys(self) -> tuple[str, ...]:
        """Keys from --api-key (comma-separated allowed) and --api-key-file, blank lines dropped."""
        keys = [k.strip() for value in self.api_key for k in value.split(",")] + [k.strip() for k in self._file_keys]
        return tuple(k for k in keys if k)

    @property
    def ui_settings(self) -> dict[str, Any]:
        """The web UI's defaults from --ui-config, else --ui-config-file (a copy: the caller may change it)."""
        return dict(self._ui_settings)


@dataclass(frozen=True, slots=True, kw_only=True)
class RouterSettings:
    """Router mode (started with no ``-m`` / ``-hf``): where the models are listed, how many run at once, and when
    an idle one stops. llama-server's router flags, plus the time-to-live and memory budget its users ask for."""

    TITLE: ClassVar[str] = "router (no -m / -hf: several models behind one URL)"

    models_dir: str | None = field(
        default=None,
        metadata=flag(
            "--models-dir",
            help="folder of models: a .gguf file is a model, a sub-folder is one (with mmproj, shards), and so is each "
            "PUBLISHER/REPO folder, as LM Studio keeps them",
        ),
    )
    models_preset: str | None = field(
        default=None,
        metadata=flag(
            "--models-preset", help="INI file of models: [*] for every model, then one [name] section per model"
        ),
    )
    models_max: int = field(
        default=4,
        metadata=flag(
            "--models-max",
            help="models loaded at once; loading one more unloads the least recently used idle one (0 = no limit)",
            type=parse_count,
        ),
    )
    models_autoload: bool = switch(
        "--models-autoload",
        help="load a model when a request names it (default; --no-models-autoload: only POST /models/load does)",
        default=True,
    )
    models_ttl: int = field(
        default=0,
        metadata=flag(
            "--models-ttl",
            help="unload a model idle for this many seconds (0 = never; a preset's ttl key sets it per model)",
            type=parse_count,
        ),
    )
    models_memory_max: int | None = field(
        default=None,
        metadata=flag(
            "--models-memory-max",
            help="memory the loaded models may use together, in bytes or with a K/M/G suffix (6G); a load that "
            "would pass it first unloads idle models",
            type=parse_size,
        ),
    )
    models_ollama: str | None = field(
        default=None,
        metadata=flag(
            "--models-ollama",
            help="Ollama's model store (its manifests and blobs) whose models to serve in place (default: "
            "OLLAMA_MODELS, else ~/.ollama/models or /usr/share/ollama/.ollama/models when there)",
            environment=("OLLAMA_MODELS",),
            metavar="DIR",
        ),
    )
    models_ollama_enabled: bool = switch(
        "--no-models-ollama",
        help="list no models of Ollama's store, wherever it is",
        default=True,
        action=OnOffAction,
    )
    models_lmstudio: str | None = field(
        default=None,
        metadata=flag(
            "--models-lmstudio",
            help="LM Studio's models folder (PUBLISHER/REPO/FILE.gguf) whose models to serve in place "
            "(default: ~/.lmstudio/models, else ~/.cache/lm-studio/models when there)",
            metavar="DIR",
        ),
    )
    models_lmstudio_enabled: bool = switch(
        "--no-models-lmstudio",
        help="list no models of LM Studio's models folder, wherever it is",
        default=True,
        action=OnOffAction,
    )


def _default(*names: str, help: str, **kwargs: Any) -> Any:
    """A sampling default's field: None (not set) unless given, for the request field of the same name."""
    return field(default=None, metadata=flag(*names, help=help, sampling=True, **kwargs))


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingSettings:
    """Defaults for what a request does not set; None leaves the choice to the GGUF, the LFM family table or
    llama-server. Then what every request gets besides its own stop strings and biases (-r, -l, --ignore-eos), the
    grammar a request without one follows (--grammar or --json-schema, each also from a file: the later given wins,
    as llama-server keeps one grammar), and --keep."""

    TITLE: ClassVar[str] = "sampling defaults"

    temperature: float | None = _default("--temp", "--temperature", help="default temperature", type=float)
    dynatemp_range: float | None = _default(
        "--dynatemp-range", help="default dynamic temperature range (0.0 = off)", type=float
    )
    dynatemp_exponent: float | None = _default(
        "--dynatemp-exp", help="default dynamic temperature exponent (1.0)", type=float
    )
    top_k: int | None = _default("--top-k", help="default top-k (0 = off)", type=int)
    top_p: float | None = _default("--top-p", help="default top-p (1.0 = off)", type=float)
    min_p: float | None = _default("--min-p", help="default min-p (0.0 = off)", type=float)
    top_n_sigma: float | None = _default(
        "--top-nsigma", "--top-n-sigma", help="default top-n-sigma (-1.0 = off)", type=float
    )
    xtc_probability: float | None = _default(
        "--xtc-probability", help="default XTC probability (0.0 = off)", type=float
    )
    xtc_threshold: float | None = _default("--xtc-threshold", help="default XTC threshold (0.1; 1.0 = off)", type=float)
    typical_p: float | None = _default(
        "--typical", "--typical-p", help="default locally typical p (1.0 = off)", type=float
    )
    repeat_penalty: float | None = _default("--repeat-penalty", help="default repeat penalty (1.0 = off)", type=float)
    repeat_last_n: int | None = _default(
        "--repeat-last-n",
        help="default penalty window (64; 0 = off, -1 = context)",
        type=int_at_least(-1, "repeat-last-n"),
    )
    presence_penalty: float | None = _default(
        "--presence-penalty", help="default presence penalty (0.0 = off; finite)", type=finite_float
    )
    frequency_penalty: float | None = _default(
        "--frequency-penalty", help="default frequency penalty (0.0 = off; finite)", type=finite_float
    )
    dry_multiplier: float | None = _default("--dry-multiplier", help="default DRY multiplier (0.0 = off)", type=float)
    dry_base: float | None = _default(
        "--dry-base", help="default DRY base (1.75; a value below 1.0 is ignored)", type=dry_base, action=StoreGiven
    )
    dry_allowed_length: int | None = _default(
        "--dry-allowed-length", help="default longest repeat DRY allows (2)", type=int
    )
    dry_penalty_last_n: int | None = _default(
        "--dry-penalty-last-n",
        help="default DRY window (64; 0 = off)",
        type=int_at_least(0, "dry-penalty-last-n"),
    )
    dry_sequence_breakers: tuple[str, ...] | None = _default(
        "--dry-sequence-breaker",
        help='a default DRY sequence breaker, replacing the default ones (\\n : " *) (repeatable; none: no breakers)',
        action="append",
        write=breakers_argv,
    )
    mirostat: int | None = _default(
        "--mirostat", help="default Mirostat: 0 off, 1 Mirostat, 2 Mirostat 2.0", type=int, choices=(0, 1, 2)
    )
    mirostat_tau: float | None = _default(
        "--mirostat-ent", help="default Mirostat target entropy tau (5.0)", type=float
    )
    mirostat_eta: float | None = _default("--mirostat-lr", help="default Mirostat learning rate eta (0.1)", type=float)
    adaptive_target: float | None = _default(
        "--adaptive-target", help="default adaptive-p target probability (0.0 to 1.0; negative = off)", type=float
    )
    adaptive_decay: float | None = _default(
        "--adaptive-decay", help="default adaptive-p decay (0.0 to 0.99; 0.9)", type=float
    )
    samplers: tuple[str, ...] | None = _default(
        "--samplers",
        help="default sampler chain: names separated by ';' (top_k;temp;min_p), or --sampling-seq: one letter each "
        "(ktm); an unknown name or letter is an error",
        type=sampler_names,
        write=samplers_argv,
        also=(
            flag(
                "--sampler-seq",
                "--sampling-seq",
                help="default sampler chain, one letter each (edskypmxt): see --samplers",
                type=sampler_codes,
                metavar="SEQUENCE",
            ),
        ),
    )
    seed: int | None = _default("-s", "--seed", help="default seed (-1 = random)", type=int)
    n_predict: int = field(
        default=-1,
        metadata=flag(
            "-n", "--n-predict", "--predict", help="default max tokens to generate (-1 = until the end)", type=int
        ),
    )
    n_keep: int = field(
        default=0,
        metadata=flag(
            "--keep",
            help="tokens of the prompt kept when the context shifts (-1 = all)",
            type=int_at_least(-1, "keep"),
        ),
    )
    reverse_prompt: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "-r",
            "--reverse-prompt",
            help="a stop string every request has besides its own (repeatable)",
            action="append",
        ),
    )
    stop: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "--stop",
            help="a default stop string, taken as written: a request that gives none of its own gets these "
            "(repeatable; Ollama's stop parameter)",
            action="append",
        ),
    )
    escape: bool = switch(
        "-e",
        "--escape",
        help="read \\n, \\r, \\t, \\', \\\", \\\\ and \\xHH in -r and --dry-sequence-breaker values as the characters",
        default=True,
    )
    ignore_eos: bool = switch(
        "--ignore-eos",
        help="every request goes on past end of generation tokens (as if biased to -inf)",
        default=False,
        action="store_true",
    )
    logit_bias: tuple[tuple[int, float], ...] = field(
        default=(),
        metadata=flag(
            "-l",
            "--logit-bias",
            help="a bias every request adds to a token's logit: 15043+1, 15043-1.5, 15043-inf bans it (repeatable)",
            type=logit_bias,
            action="append",
            metavar="TOKEN_ID(+/-)BIAS",
            write=logit_bias_argv,
        ),
    )
    grammar: str | None = field(
        default=None,
        metadata=flag(
            "--grammar",
            help="GBNF grammar every request's output follows unless it gives its own (--grammar-file: from a file)",
            action=OneGrammar,
            clears="json_schema",
            also=(
                flag(
                    "--grammar-file",
                    help="file to read --grammar from (read at start)",
                    type=read_text,
                    action=OneGrammar,
                    clears="json_schema",
                    metavar="FNAME",
                ),
            ),
        ),
    )
    json_schema: str | None = field(
        default=None,
        metadata=flag(
            "-j",
            "--json-schema",
            help="JSON schema every request's output follows unless it gives its own, kept as its text "
            "(-jf: from a file, read at start)",
            type=json_schema,
            action=OneGrammar,
            clears="grammar",
            metavar="SCHEMA",
            also=(
                flag(
                    "-jf",
                    "--json-schema-file",
                    help="file to read --json-schema from (read at start)",
                    type=json_schema_file,
                    action=OneGrammar,
                    clears="grammar",
                    metavar="FILE",
                ),
            ),
        ),
    )
    backend_sampling: bool = switch(
        "-bs",
        "--backend-sampling",
        help="accepted for llama-server's scripts (sampling runs on the CPU either way)",
        default=False,
        action="store_true",
    )

    def __post_init__(self) -> None:
        if self.dry_sequence_breakers is not None:  # "none" drops the breakers given before it
            object.__setattr__(self, "dry_sequence_breakers", fold_breakers(self.dry_sequence_breakers))
        if self.grammar is not None and self.json_schema is not None:
            raise ValueError(  # only LFMSERVE_GRAMMAR with LFMSERVE_JSON_SCHEMA: a flag unsets the other
                "grammar and json_schema are both set: give one, as llama-server keeps one grammar (on the command "
                "line, the later of --grammar and --json-schema wins)"
            )

    def defaults(self) -> dict[str, Any]:
        """The sampling defaults set here (on the command line), by request field name."""
        return {name: getattr(self, name) for name in sampling_fields() if getattr(self, name) is not None}

    @property
    def json_schema_value(self) -> dict[str, Any] | bool | None:
        """``--json-schema``'s schema, parsed (it was checked when read)."""
        return None if self.json_schema is None else json.loads(self.json_schema)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoggingSettings:
    """Where the log goes and what its lines show: llama-server's logging flags, for lfmserve's and llama.cpp's."""

    TITLE: ClassVar[str] = "logging"

    log_disable: bool = switch("--log-disable", help="log nothing", default=False, action="store_true")
    log_file: str | None = field(
        default=None,
        metadata=flag(
            "--log-file",
            help="also write the log to this file, emptied first (a router's children log only to the shared stderr)",
        ),
    )
    log_colors: str = field(
        default="auto",
        metadata=flag(
            "--log-colors",
            help="colored log lines: on, off or auto (on when stderr is a terminal, NO_COLOR is unset and TERM is not "
            "dumb)",
            choices=("on", "off", "auto"),
        ),
    )
    log_verbosity: int = field(
        default=3,
        metadata=flag(
            "-lv",
            "--verbosity",
            "--log-verbosity",
            help="most verbose level logged: 0 critical only, 1 errors, 2 warnings, 3 info, 4 also llama.cpp's own "
            "info lines (TRACE), 5 debug (-v: everything)",
            type=int,
        ),
    )
    log_prefix: bool = switch(
        "--log-prefix",
        help="begin each line with its time, level and logger (--no-log-prefix: the message alone)",
        default=True,
    )
    log_timestamps: bool = switch(
        "--log-timestamps", help="the time in each line's prefix, and in JSONL's time field", default=True
    )
    log_jsonl: bool = switch(
        "--log-jsonl",
        help="log one JSON object per line to stdout (type, time, level, logger, msg), without colors",
        default=False,
    )

    @property
    def level(self) -> int:
        """The :mod:`logging` level ``-lv`` stands for. llama.cpp's scale has six steps and Python's five, so its
        trace step (4) is the level, between DEBUG and INFO, that :mod:`lfmserve.llama` gives llama.cpp's own
        info lines, as llama-server shows them only from 4 on."""
        return _LOG_LEVELS[min(max(self.log_verbosity, 0), len(_LOG_LEVELS) - 1)]


#: ``-lv`` 0 to 5 as :mod:`logging` levels (below 0 as 0, above 5 as 5).
_LOG_LEVELS = (logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO, logging.INFO - 5, logging.DEBUG)

#: The groups, as :class:`~lfmserve.settings.Settings` names them, in ``--help`` order.
GROUPS: dict[str, type[Any]] = {
    "source": SourceSettings,
    "chat": ChatSettings,
    "media": MediaSettings,
    "embedding": EmbeddingSettings,
    "weights": WeightSettings,
    "engine": EngineSettings,
    "threads": ThreadSettings,
    "devices": DeviceSettings,
    "speculation": SpeculationSettings,
    "server": ServerSettings,
    "router": RouterSettings,
    "sampling": SamplingSettings,
    "logging": LoggingSettings,
}


def sampling_fields() -> tuple[str, ...]:
    """The fields that are sampling defaults (named as the request fields they default)."""
    return tuple(f.name for f in dataclasses.fields(SamplingSettings) if flag_spec(f).sampling)


def control_vector_files(engine: EngineSettings) -> tuple[tuple[str, float], ...]:
    """Each control vector file and its scale, as llama-server reads them: ``--control-vector`` ones at 1, then
    ``--control-vector-scaled`` ones (each ``FNAME:SCALE`` with one colon, the scale read as ``std::stof`` reads
    it). Raises ValueError for an entry of another form."""
    vectors = [(path, 1.0) for value in engine.control_vector for path in _csv_row(value)]
    for value in engine.control_vector_scaled:
        for item in _csv_row(value):
            parts = item.split(":")
            scale = leading_float(parts[-1])  # std::stof: a scale of ``0.5x`` is 0.5
            if len(parts) != 2 or scale is None:
                raise ValueError(f"--control-vector-scaled {item!r}: expected FNAME:SCALE")
            vectors.append((parts[0], scale))
    return tuple(vectors)


def _csv_row(value: str) -> list[str]:
    """llama.cpp's ``parse_csv_row``: comma-separated, double quotes around a field that has commas, empty fields
    kept."""
    return next(csv.reader([value]), [""])


def _read_text(name: str, path: str) -> str:
    """The file at ``path``, whole; ValueError starting with ``name`` (its flag and path) when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise ValueError(f"{name}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{name}: not UTF-8 text") from None


def _json_object(name: str, text: str) -> dict[str, Any]:
    """``text`` as a JSON object; ValueError naming where it came from otherwise."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{name}: not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name}: not a JSON object")
    return value


def _comma_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _comma_set(value: str | None) -> tuple[str, ...]:
    return tuple(sorted({part.strip() for part in (value or "").split(",") if part.strip()}))
