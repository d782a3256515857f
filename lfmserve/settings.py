"""Settings: every knob of the server and library in one frozen dataclass, and its command line.

Flag names, short forms and meanings follow llama-server (``-m``, ``-hf``, ``-c``, ``-np``, ``-ngl``,
``--jinja``...). Each field's flag and help live in the field's metadata, so :meth:`Settings.from_argv`
builds the parser from the class and nothing is written twice. Environment variables
``LFMSERVE_<FIELD>`` (for example ``LFMSERVE_PORT=9000``) give defaults that flags override; they
are read here and nowhere else.

Example::

    settings = Settings.from_argv(["-m", "model.gguf", "-c", "4096", "--port", "8080"])
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from .engine.records import KV_CACHE_TYPES

DEFAULT_HF_REPO = "LiquidAI/LFM2.5-1.2B-Instruct-GGUF:Q4_K_M"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _flag(*names: str, help: str, sampling: bool = False, **argparse_kwargs: Any) -> dict[str, Any]:
    """Field metadata: its flags and help; ``sampling`` marks a default for the request field of the same name."""
    return {"flags": names, "help": help, "sampling": sampling, "argparse": argparse_kwargs}


def _switch(*names: str, help: str, default: bool | None, action: Any = argparse.BooleanOptionalAction) -> Any:
    """A boolean field and its flags (``--x`` / ``--no-x`` unless ``action`` says otherwise); a None default is
    decided where the field is used."""
    return field(default=default, metadata=_flag(*names, help=help, action=action))


def physical_cores() -> int:
    """Physical cores (llama-server's default thread count), counted from sysfs; logical as fallback."""
    cores: set[tuple[str, str]] = set()
    base = "/sys/devices/system/cpu"
    try:
        for name in os.listdir(base):
            topo = os.path.join(base, name, "topology")
            if name.startswith("cpu") and name[3:].isdigit() and os.path.isdir(topo):
                with (
                    open(os.path.join(topo, "physical_package_id")) as pkg,
                    open(os.path.join(topo, "core_id")) as core,
                ):
                    cores.add((pkg.read().strip(), core.read().strip()))
    except OSError:
        cores.clear()
    return len(cores) or os.cpu_count() or 1


#: llama-server's short "off" spellings that do not start with ``no``.
_SHORT_OFF_FLAGS = frozenset({"-nr"})


class OnOffAction(argparse.Action):
    """A switch with several spellings: a flag starting ``--no-`` (or llama-server's short ``-no-kvu``, ``-nocb``,
    ``-nr``) turns it off, any other turns it on."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        option = option or ""
        setattr(namespace, self.dest, not (option.lstrip("-").startswith("no") or option in _SHORT_OFF_FLAGS))


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Everything the CLI can set. Tests build one directly: ``Settings(model="tiny.gguf")``."""

    # -- model -------------------------------------------------------------------------------------
    model: str | None = field(default=None, metadata=_flag("-m", "--model", help="path to a GGUF model file"))
    hf_repo: str | None = field(
        default=None,
        metadata=_flag(
            "-hf",
            "-hfr",
            "--hf-repo",
            help="Hugging Face repo[:quant] to download the GGUF from "
            f"(default quant Q4_K_M; used when -m is absent, default {DEFAULT_HF_REPO})",
        ),
    )
    offline: bool = _switch(
        "--offline", help="use only the Hugging Face cache: no network (-hf, -hfd)", default=False, action="store_true"
    )
    hf_file: str | None = field(
        default=None, metadata=_flag("-hff", "--hf-file", help="file in the -hf repo (overrides the quant)")
    )
    alias: str | None = field(
        default=None,
        metadata=_flag(
            "-a",
            "--alias",
            help="model names for the API, comma-separated; the id is the first in sorted order (default: file name)",
        ),
    )
    tags: str | None = field(
        default=None, metadata=_flag("--tags", help="model tags, comma-separated (shown by /v1/models)")
    )
    jinja: bool = _switch(
        "--jinja",
        help="render the GGUF's Jinja chat template (default; --no-jinja uses llama.cpp's built-in formats)",
        default=True,
    )
    chat_template_file: str | None = field(
        default=None, metadata=_flag("--chat-template-file", help="Jinja chat template file overriding the GGUF's")
    )
    chat_template: str | None = field(
        default=None,
        metadata=_flag(
            "--chat-template",
            help="chat template: one of llama.cpp's built-in names (chatml, llama3, gemma...) or Jinja source",
        ),
    )
    reasoning_format: str = field(
        default="auto",
        metadata=_flag(
            "--reasoning-format",
            help="where <think> text goes: auto/deepseek = reasoning_content, none = left in content, "
            "nothink = reasoning off",
            choices=("auto", "deepseek", "deepseek-legacy", "none", "nothink"),
        ),
    )
    reasoning: str = field(
        default="auto",
        metadata=_flag(
            "-rea",
            "--reasoning",
            help="reasoning in the chat: on, off (the template is told enable_thinking=false) or auto",
            choices=("on", "off", "auto"),
        ),
    )
    reasoning_budget: int = field(
        default=-1,
        metadata=_flag(
            "--reasoning-budget", help="thinking tokens allowed (-1 = unrestricted, 0 = end thinking at once)", type=int
        ),
    )
    # -- multimodal -------------------------------------------------------------------------------
    mmproj: str | None = field(
        default=None, metadata=_flag("-mm", "--mmproj", help="multimodal projector GGUF (images, audio)")
    )
    mmproj_auto: bool = _switch(
        "--mmproj-auto",
        "--no-mmproj",
        "--no-mmproj-auto",
        help="with -hf, also fetch the repo's projector when it has one (default; --no-mmproj: text only)",
        default=True,
        action=OnOffAction,
    )
    mmproj_offload: bool = _switch(
        "--mmproj-offload",
        help="run the projector on a GPU when there is one (--no-mmproj-offload: on the CPU)",
        default=True,
    )
    image_min_tokens: int = field(
        default=-1,
        metadata=_flag("--image-min-tokens", help="fewest tokens an image takes (-1 = the projector's)", type=int),
    )
    image_max_tokens: int = field(
        default=-1,
        metadata=_flag("--image-max-tokens", help="most tokens an image takes (-1 = the projector's)", type=int),
    )
    media_path: str | None = field(
        default=None, metadata=_flag("--media-path", help="folder that file:// media URLs are read from")
    )
    media_fetch: bool = _switch(
        "--media-fetch",
        help="fetch http(s):// media URLs (default; --no-media-fetch refuses them)",
        default=True,
    )
    media_fetch_private: bool = _switch(
        "--media-fetch-private",
        help="allow media URLs whose host is a loopback, private or link-local address",
        default=False,
        action="store_true",
    )
    media_encode_beside: bool = _switch(
        "--media-encode-beside",
        help="encode media on half the cores while other streams keep generating (default; holds the "
        "projector twice; --no-media-encode-beside: streams wait for each encode, as in llama-server)",
        default=True,
    )
    media_cache: int = field(
        default=256,
        metadata=_flag("--media-cache", help="MiB of projector output kept for media seen before (0 = off)", type=int),
    )
    # -- embeddings -------------------------------------------------------------------------------
    embeddings: bool = _switch(
        "--embedding",
        "--embeddings",
        help="also serve /v1/embeddings and /embedding (a second context; chat and completions keep working)",
        default=False,
        action="store_true",
    )
    reranking: bool = _switch(
        "--rerank",
        "--reranking",
        help="also serve /rerank and /v1/rerank (embeddings with rank pooling; the model needs a classifier head)",
        default=False,
        action="store_true",
    )
    pooling: str | None = field(
        default=None,
        metadata=_flag(
            "--pooling",
            help="how a text's token embeddings become one vector (default: the model's)",
            choices=("none", "mean", "cls", "last", "rank"),
        ),
    )
    embd_normalize: int = field(
        default=2,
        metadata=_flag(
            "--embd-normalize",
            help="embedding normalisation: 2 Euclidean (default), -1 none, 0 max-abs to int16, 1 taxicab, p > 2 p-norm",
            type=int,
        ),
    )
    # -- speculative decoding -----------------------------------------------------------------------
    spec_type: str | None = field(
        default=None,
        metadata=_flag(
            "--spec-type",
            help="speculative decoding, comma-separated: ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, "
            "ngram-cache (drafts from the request's own tokens), draft-simple (a draft model; default: none)",
        ),
    )
    spec_draft_model: str | None = field(
        default=None,
        metadata=_flag("--spec-draft-model", "-md", "--model-draft", help="draft model GGUF (draft-simple)"),
    )
    spec_draft_hf: str | None = field(
        default=None,
        metadata=_flag(
            "--spec-draft-hf", "-hfd", "-hfrd", "--hf-repo-draft", help="draft model from Hugging Face, repo[:quant]"
        ),
    )
    spec_draft_n_max: int = field(
        default=3,
        metadata=_flag("--spec-draft-n-max", help="tokens the draft model guesses per step (draft-simple)", type=int),
    )
    spec_draft_n_min: int = field(
        default=0, metadata=_flag("--spec-draft-n-min", help="shorter drafts are not verified", type=int)
    )
    spec_draft_p_min: float = field(
        default=0.0,
        metadata=_flag(
            "--spec-draft-p-min",
            "--draft-p-min",
            help="the draft model stops guessing below this probability (draft-simple)",
            type=float,
        ),
    )
    spec_ngram_simple_size_n: int = field(
        default=12, metadata=_flag("--spec-ngram-simple-size-n", help="tokens looked up (ngram-simple)", type=int)
    )
    spec_ngram_simple_size_m: int = field(
        default=48, metadata=_flag("--spec-ngram-simple-size-m", help="most tokens drafted (ngram-simple)", type=int)
    )
    spec_ngram_simple_min_hits: int = field(
        default=1,
        metadata=_flag("--spec-ngram-simple-min-hits", help="accepted as llama-server's (unused there too)", type=int),
    )
    spec_ngram_map_k_size_n: int = field(
        default=12, metadata=_flag("--spec-ngram-map-k-size-n", help="tokens looked up (ngram-map-k)", type=int)
    )
    spec_ngram_map_k_size_m: int = field(
        default=48, metadata=_flag("--spec-ngram-map-k-size-m", help="most tokens drafted (ngram-map-k)", type=int)
    )
    spec_ngram_map_k_min_hits: int = field(
        default=1, metadata=_flag("--spec-ngram-map-k-min-hits", help="accepted as llama-server's", type=int)
    )
    spec_ngram_map_k4v_size_n: int = field(
        default=12, metadata=_flag("--spec-ngram-map-k4v-size-n", help="tokens looked up (ngram-map-k4v)", type=int)
    )
    spec_ngram_map_k4v_size_m: int = field(
        default=48, metadata=_flag("--spec-ngram-map-k4v-size-m", help="most tokens drafted (ngram-map-k4v)", type=int)
    )
    spec_ngram_map_k4v_min_hits: int = field(
        default=1,
        metadata=_flag("--spec-ngram-map-k4v-min-hits", help="sightings of a key before it drafts", type=int),
    )
    spec_ngram_mod_n_match: int = field(
        default=24, metadata=_flag("--spec-ngram-mod-n-match", help="tokens hashed (ngram-mod)", type=int)
    )
    spec_ngram_mod_n_min: int = field(
        default=48, metadata=_flag("--spec-ngram-mod-n-min", help="shortest draft (ngram-mod)", type=int)
    )
    spec_ngram_mod_n_max: int = field(
        default=64, metadata=_flag("--spec-ngram-mod-n-max", help="longest draft (ngram-mod)", type=int)
    )
    # -- context and batching ---------------------------------------------------------------------
    ctx_size: int = field(
        default=0, metadata=_flag("-c", "--ctx-size", help="context size in tokens (0 = the model's)", type=int)
    )
    n_predict: int = field(
        default=-1,
        metadata=_flag(
            "-n", "--n-predict", "--predict", help="default max tokens to generate (-1 = until the end)", type=int
        ),
    )
    threads: int = field(
        default_factory=physical_cores,
        metadata=_flag("-t", "--threads", help="threads for generation (default: physical cores)", type=int),
    )
    threads_batch: int | None = field(
        default=None,
        metadata=_flag("-tb", "--threads-batch", help="threads for prompt processing (default: --threads)", type=int),
    )
    batch_size: int = field(default=2048, metadata=_flag("-b", "--batch-size", help="logical batch size", type=int))
    ubatch_size: int = field(default=512, metadata=_flag("-ub", "--ubatch-size", help="physical batch size", type=int))
    flash_attn: str = field(
        default="auto",
        metadata=_flag("-fa", "--flash-attn", help="flash attention: on, off or auto", choices=("on", "off", "auto")),
    )
    cache_type_k: str = field(
        default="f16",
        metadata=_flag("-ctk", "--cache-type-k", help="KV cache type for K", choices=KV_CACHE_TYPES),
    )
    cache_type_v: str = field(
        default="f16",
        metadata=_flag(
            "-ctv",
            "--cache-type-v",
            help="KV cache type for V (quantized needs flash attention)",
            choices=KV_CACHE_TYPES,
        ),
    )
    swa_full: bool = _switch(
        "--swa-full",
        help="full-size sliding-window cache (more memory, no re-processing)",
        default=False,
        action="store_true",
    )
    kv_unified: bool = _switch(
        "-kvu",
        "--kv-unified",
        "-no-kvu",
        "--no-kv-unified",
        help="one KV pool shared by all slots (default; lfmserve divides it between slots itself)",
        default=True,
        action=OnOffAction,
    )
    context_shift: bool = _switch(
        "--context-shift",
        help="when a generation fills its slot's context, drop the older half and go on (attention-only models)",
        default=False,
    )
    parallel: int = field(
        default=4,
        metadata=_flag("-np", "--parallel", help="number of slots; each gets --ctx-size / N tokens", type=int),
    )
    n_gpu_layers: int = field(
        default=-1,
        metadata=_flag(
            "-ngl", "--gpu-layers", "--n-gpu-layers", help="layers to offload to a GPU, passed to llama.cpp", type=int
        ),
    )
    repack: bool | None = _switch(
        "--repack",
        "-nr",
        "--no-repack",
        help="weights repacked into llama.cpp's faster CPU layouts (default: on, but off where llama.cpp was built "
        "for AMX, whose matrix multiply crashes: llama.cpp issue 20824)",
        default=None,
        action=OnOffAction,
    )
    # -- scheduling and prompt cache ---------------------------------------------------------------
    slot_prompt_similarity: float = field(
        default=0.10,
        metadata=_flag(
            "-sps",
            "--slot-prompt-similarity",
            help="reuse an idle slot whose cache shares more than this fraction of the prompt",
            type=float,
        ),
    )
    max_queue: int = field(
        default=1024,
        metadata=_flag("--max-queue", help="requests that may wait for a slot; more answer 503", type=int),
    )
    ctx_checkpoints: int = field(
        default=32,
        metadata=_flag(
            "--ctx-checkpoints",
            "--swa-checkpoints",
            help="checkpoints of the recurrent / sliding-window state kept per slot",
            type=int,
        ),
    )
    cache_ram: int = field(
        default=8192,
        metadata=_flag("-cram", "--cache-ram", help="MiB of host RAM for evicted prompt caches (0 = off)", type=int),
    )
    cache_reuse: int = field(
        default=0,
        metadata=_flag(
            "--cache-reuse",
            help="min chunk size to reuse from the cache by KV shifting (attention-only models; 0 = off)",
            type=int,
        ),
    )
    cache_prompt: bool = _switch(
        "--cache-prompt",
        help="reuse the cached prefix of a prompt: the default of a request's cache_prompt",
        default=True,
    )
    cache_idle_slots: bool = _switch(
        "--cache-idle-slots",
        help="keep an idle slot's prompt in the RAM cache (--cache-ram) when another request takes the slot",
        default=True,
    )
    slots_endpoint: bool = _switch("--slots", help="expose GET /slots (default; --no-slots answers 501)", default=True)
    slot_save_path: str | None = field(
        default=None, metadata=_flag("--slot-save-path", help="folder for POST /slots/{id}?action=save|restore")
    )
    metrics: bool = _switch("--metrics", help="expose GET /metrics (Prometheus)", default=False, action="store_true")
    trace_requests: str | None = field(
        default=None,
        metadata=_flag(
            "--trace-requests",
            help="append each generation request's shape (route key, hashes and lengths of its message prefixes, "
            "max_tokens; never its text) to this JSONL file, for bench/replay_trace.py",
        ),
    )
    # -- server -----------------------------------------------------------------------------------
    host: str = field(default="127.0.0.1", metadata=_flag("--host", help="addresses to listen on, comma-separated"))
    port: int = field(default=8080, metadata=_flag("--port", help="port to listen on", type=int))
    shutdown_timeout: float = field(
        default=10.0,
        metadata=_flag(
            "--shutdown-timeout",
            help="seconds running requests may take to finish on SIGTERM / Ctrl-C; the rest then end with a 503",
            type=float,
        ),
    )
    max_body_bytes: int = field(
        default=64 * 2**20,
        metadata=_flag(
            "--max-body-bytes",
            help="largest request body accepted, in bytes (default 64 MiB: a few large images); more answers 413",
            type=int,
        ),
    )
    api_key: tuple[str, ...] = field(
        default=(),
        metadata=_flag("--api-key", help="API key clients must send (repeatable, or comma-separated)", action="append"),
    )
    api_key_file: str | None = field(
        default=None, metadata=_flag("--api-key-file", help="file with one API key per line")
    )
    cors_origins: str = field(
        default="*",
        metadata=_flag(
            "--cors-origins",
            help="origins allowed by CORS, comma-separated; 'localhost' allows only local pages (default: *)",
        ),
    )
    ui: bool = _switch(
        "--ui",
        "--webui",
        "--no-ui",
        "--no-webui",
        help="serve the web UI at / (default; --no-ui answers 404 there)",
        default=True,
        action=OnOffAction,
    )
    props: bool = _switch(
        "--props", help="allow changing server properties with POST /props", default=False, action="store_true"
    )
    sleep_idle_seconds: int = field(
        default=-1,
        metadata=_flag(
            "--sleep-idle-seconds",
            help="unload the model after this many idle seconds, reload it on the next request (-1 = never)",
            type=int,
        ),
    )
    threads_http: int = field(
        default=-1,
        metadata=_flag(
            "--threads-http", help="accepted for llama-server's scripts (requests are served by asyncio)", type=int
        ),
    )
    timeout: int = field(
        default=3600,
        metadata=_flag(
            "-to",
            "--timeout",
            help="accepted for llama-server's scripts, where it is the socket read/write timeout; uvicorn has none "
            "(a connection idle between requests closes after 5 s, as in llama-server)",
            type=int,
        ),
    )
    cont_batching: bool = _switch(
        "-cb",
        "--cont-batching",
        "-nocb",
        "--no-cont-batching",
        help="continuous batching: always on in lfmserve (-nocb is accepted and has no effect)",
        default=True,
        action=OnOffAction,
    )
    verbose: bool = _switch(
        "-v", "--verbose", help="log per-step detail and llama.cpp's own log", default=False, action="store_true"
    )
    # -- sampling defaults (None = not set here: the GGUF, the LFM family table or llama-server decides);
    # each is named as the request field it is the default of.
    temperature: float | None = field(
        default=None,
        metadata=_flag("--temp", "--temperature", help="default temperature", sampling=True, type=float),
    )
    top_k: int | None = field(
        default=None, metadata=_flag("--top-k", help="default top-k (0 = off)", sampling=True, type=int)
    )
    top_p: float | None = field(
        default=None, metadata=_flag("--top-p", help="default top-p (1.0 = off)", sampling=True, type=float)
    )
    min_p: float | None = field(
        default=None, metadata=_flag("--min-p", help="default min-p (0.0 = off)", sampling=True, type=float)
    )
    repeat_penalty: float | None = field(
        default=None,
        metadata=_flag("--repeat-penalty", help="default repeat penalty (1.0 = off)", sampling=True, type=float),
    )
    repeat_last_n: int | None = field(
        default=None,
        metadata=_flag("--repeat-last-n", help="default penalty window (-1 = context)", sampling=True, type=int),
    )
    seed: int | None = field(
        default=None, metadata=_flag("-s", "--seed", help="default seed (-1 = random)", sampling=True, type=int)
    )
    reverse_prompt: tuple[str, ...] = field(
        default=(),
        metadata=_flag(
            "-r",
            "--reverse-prompt",
            help="a stop string every request has besides its own (repeatable)",
            action="append",
        ),
    )
    backend_sampling: bool = _switch(
        "-bs",
        "--backend-sampling",
        help="accepted for llama-server's scripts (sampling runs on the CPU either way)",
        default=False,
        action="store_true",
    )

    @property
    def api_keys(self) -> tuple[str, ...]:
        """Keys from --api-key (comma-separated allowed) and --api-key-file, blank lines dropped."""
        keys = [k.strip() for value in self.api_key for k in value.split(",")]
        if self.api_key_file:
            with open(self.api_key_file, encoding="utf-8") as handle:
                keys += [line.strip() for line in handle]
        return tuple(k for k in keys if k)

    @property
    def aliases(self) -> tuple[str, ...]:
        """``--alias``'s names, sorted and without repeats (llama-server keeps them in a ``std::set``)."""
        return _comma_set(self.alias)

    @property
    def tag_list(self) -> tuple[str, ...]:
        return _comma_set(self.tags)

    def sampling_defaults(self) -> dict[str, float | int]:
        """The sampling defaults set here (on the command line), by request field name."""
        return {name: getattr(self, name) for name in sampling_fields() if getattr(self, name) is not None}

    @classmethod
    def from_argv(cls, argv: Sequence[str] | None = None) -> Settings:
        """Parse llama-server style arguments; an unknown flag exits with status 2 and one line."""
        parser = _OneLineErrorParser(
            prog="lfmserve",
            usage="lfmserve [options]",
            allow_abbrev=False,
            description="Serve LFM (and other GGUF) models with llama-server's HTTP API.",
        )
        env_defaults = _environment_defaults(parser)
        groups = {title: parser.add_argument_group(title) for title in HELP_GROUPS}
        for f in dataclasses.fields(cls):
            meta = f.metadata
            kwargs = dict(meta["argparse"])
            kwargs.setdefault("default", env_defaults.get(f.name, argparse.SUPPRESS))
            groups[_help_group(f)].add_argument(*meta["flags"], dest=f.name, help=meta["help"], **kwargs)
        for flags, message in REFUSED_FLAGS.items():
            groups["refused flags"].add_argument(
                *flags, action=_RefusedFlag, nargs="?", default=argparse.SUPPRESS, help=message
            )
        values = vars(parser.parse_args(_dashed(sys.argv[1:] if argv is None else argv)))
        for name in ("api_key", "reverse_prompt"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)


#: ``--help`` sections, as llama-server's (its "example-specific" params are the server's), then the flags of
#: llama-server's that lfmserve refuses with a reason.
HELP_GROUPS = ("common params", "sampling params", "speculative params", "server params", "refused flags")
#: The fields llama-server lists among its common params (the rest that are not sampling or speculative are
#: server params).
_COMMON = frozenset(
    "threads threads_batch ctx_size n_predict batch_size ubatch_size swa_full flash_attn cache_type_k cache_type_v"
    " n_gpu_layers repack model hf_repo hf_file offline verbose".split()
)

#: llama-server flags lfmserve does not take, and why: each fails at startup with its message (llama-server's
#: own message for the ones it removed).
REFUSED_FLAGS: dict[tuple[str, ...], str] = {
    ("--draft", "--draft-n", "--draft-max"): "the argument has been removed. use --spec-draft-n-max or "
    "--spec-ngram-mod-n-max",
    ("--draft-min", "--draft-n-min"): "the argument has been removed. use --spec-draft-n-min or --spec-ngram-mod-n-min",
    ("--spec-ngram-size-n",): "the argument has been removed. use the respective --spec-ngram-*-size-n",
    ("--spec-ngram-size-m",): "the argument has been removed. use the respective --spec-ngram-*-size-m",
    ("--spec-ngram-min-hits",): "the argument has been removed. use the respective --spec-ngram-*-min-hits",
    ("--lora", "--lora-scaled", "--lora-init-without-apply"): "LoRA adapters are not supported by lfmserve",
    ("--models-dir", "--models-preset", "--models-max", "--models-autoload", "--no-models-autoload"): (
        "the router (several models in one server) is not supported by lfmserve: run one lfmserve per model"
    ),
    ("-mu", "--model-url", "-mmu", "--mmproj-url"): "downloads by URL are not supported by lfmserve: use -hf or -m",
    ("--tools", "--tools-runtime", "--mcp-servers-config", "--mcp-servers-json", "--ui-mcp-proxy", "--agent"): (
        "built-in tools and MCP servers are not supported by lfmserve"
    ),
    ("--spec-synth-len", "--spec-synth-rates"): "synthetic speculation is not supported by lfmserve",
}


class _RefusedFlag(argparse.Action):
    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        parser.error(f"{option}: {self.help}")


def _help_group(f: dataclasses.Field[Any]) -> str:
    if f.metadata["sampling"] or f.name in ("reverse_prompt", "backend_sampling"):
        return "sampling params"
    if f.name.startswith("spec_"):
        return "speculative params"
    return "common params" if f.name in _COMMON else "server params"


def _dashed(argv: Sequence[str]) -> list[str]:
    """llama-server reads ``--long_flag`` as ``--long-flag``: the same here (values are left alone)."""
    out = []
    for arg in argv:
        if arg.startswith("--") and "_" in arg:
            name, eq, value = arg.partition("=")
            arg = name.replace("_", "-") + eq + value
        out.append(arg)
    return out


class _OneLineErrorParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _comma_set(value: str | None) -> tuple[str, ...]:
    return tuple(sorted({part.strip() for part in (value or "").split(",") if part.strip()}))


def sampling_fields() -> tuple[str, ...]:
    """The Settings fields that are sampling defaults (named as the request fields they default)."""
    return tuple(f.name for f in dataclasses.fields(Settings) if f.metadata["sampling"])


def _environment_defaults(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """``LFMSERVE_<FIELD>`` values, converted to the field's type; a value that does not convert is an error."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        variable = f"LFMSERVE_{f.name.upper()}"
        raw = os.environ.get(variable)
        if raw is None:
            continue
        kind = f.metadata["argparse"].get("type")
        action = f.metadata["argparse"].get("action")
        if action in ("store_true", argparse.BooleanOptionalAction, OnOffAction):
            value = raw.strip().lower()
            if value not in _TRUE + _FALSE:
                parser.error(f"environment variable {variable} has value {raw!r}: not a valid bool")
            out[f.name] = value in _TRUE
        elif action == "append":
            out[f.name] = [raw]
        elif kind is not None:
            try:
                out[f.name] = kind(raw)
            except ValueError:
                parser.error(f"environment variable {variable} has value {raw!r}: not a valid {kind.__name__}")
        else:
            out[f.name] = raw
    return out
