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

DEFAULT_HF_REPO = "LiquidAI/LFM2.5-1.2B-Instruct-GGUF:Q4_K_M"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _flag(*names: str, help: str, sampling: bool = False, **argparse_kwargs: Any) -> dict[str, Any]:
    """Field metadata: its flags and help; ``sampling`` marks a default for the request field of the same name."""
    return {"flags": names, "help": help, "sampling": sampling, "argparse": argparse_kwargs}


def _switch(*names: str, help: str, default: bool, action: Any = argparse.BooleanOptionalAction) -> Any:
    """A boolean field and its flags (``--x`` / ``--no-x`` unless ``action`` says otherwise)."""
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


class OnOffAction(argparse.Action):
    """A switch with several spellings: a flag starting ``--no-`` turns it off, any other turns it on."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(namespace, self.dest, not (option or "").startswith("--no-"))


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
        default=None, metadata=_flag("-a", "--alias", help="model name shown by /v1/models (default: file name)")
    )
    jinja: bool = _switch(
        "--jinja",
        help="render the GGUF's Jinja chat template (default; --no-jinja uses llama.cpp's built-in formats)",
        default=True,
    )
    chat_template_file: str | None = field(
        default=None, metadata=_flag("--chat-template-file", help="Jinja chat template file overriding the GGUF's")
    )
    reasoning_format: str = field(
        default="auto",
        metadata=_flag(
            "--reasoning-format",
            help="where <think> text goes: auto/deepseek = reasoning_content, none = left in content",
            choices=("auto", "deepseek", "deepseek-legacy", "none"),
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
    slots_endpoint: bool = _switch("--slots", help="expose GET /slots (default; --no-slots answers 501)", default=True)
    slot_save_path: str | None = field(
        default=None, metadata=_flag("--slot-save-path", help="folder for POST /slots/{id}?action=save|restore")
    )
    metrics: bool = _switch("--metrics", help="expose GET /metrics (Prometheus)", default=False, action="store_true")
    # -- server -----------------------------------------------------------------------------------
    host: str = field(default="127.0.0.1", metadata=_flag("--host", help="address to listen on"))
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

    @property
    def api_keys(self) -> tuple[str, ...]:
        """Keys from --api-key (comma-separated allowed) and --api-key-file, blank lines dropped."""
        keys = [k.strip() for value in self.api_key for k in value.split(",")]
        if self.api_key_file:
            with open(self.api_key_file, encoding="utf-8") as handle:
                keys += [line.strip() for line in handle]
        return tuple(k for k in keys if k)

    def sampling_defaults(self) -> dict[str, float | int]:
        """The sampling defaults set here (on the command line), by request field name."""
        return {name: getattr(self, name) for name in sampling_fields() if getattr(self, name) is not None}

    @classmethod
    def from_argv(cls, argv: Sequence[str] | None = None) -> Settings:
        """Parse llama-server style arguments; an unknown flag exits with status 2 and one line."""
        parser = _OneLineErrorParser(
            prog="lfmserve",
            allow_abbrev=False,
            description="Serve LFM (and other GGUF) models with llama-server's HTTP API.",
        )
        env_defaults = _environment_defaults(parser)
        for f in dataclasses.fields(cls):
            meta = f.metadata
            kwargs = dict(meta["argparse"])
            kwargs.setdefault("default", env_defaults.get(f.name, argparse.SUPPRESS))
            parser.add_argument(*meta["flags"], dest=f.name, help=meta["help"], **kwargs)
        values = vars(parser.parse_args(list(sys.argv[1:] if argv is None else argv)))
        if "api_key" in values:
            values["api_key"] = tuple(values["api_key"])
        return cls(**values)


class _OneLineErrorParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


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
