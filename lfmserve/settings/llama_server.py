"""llama-server's options, every one its pinned ``--help`` lists, and what lfmserve does with each.

Scripts, containers and router presets written for llama-server pass its flags and its ``LLAMA_ARG_*``
variables, so lfmserve must never read one as something else nor stop without naming it. Each option here has
one :class:`Disposition`: *applied* (its spellings are a settings field's flags), *applied differently* (the
note says how and why), *ignored on this build* (accepted with its values, and named in one warning line at
start), *later* (refused, naming what a later change brings) or *refused* (for good, saying why).

The parser (:mod:`.argv`) takes the applied spellings from the fields and adds the others from this table; a
field's ``LLAMA_ARG_*`` variable is found here by its spelling, so a field that takes a llama-server flag reads
llama-server's variable with no more said. A row reads as the help does: spellings, ``/`` before the ones that
turn a switch off, value placeholders (how many values it takes), then ``$`` and its variable.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class Disposition(enum.Enum):
    APPLIED = "applied"
    DIFFERENT = "applied differently"
    IGNORED = "ignored on this build"
    LATER = "later"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Option:
    """One option of llama-server's ``--help``: its spellings as listed (``negative`` the ones that turn it
    off), how many values it takes, its variable, and what lfmserve does with it (``why``: how, or why not)."""

    spellings: tuple[str, ...]
    negative: tuple[str, ...]
    values: int
    env: str | None
    disposition: Disposition
    why: str

    @property
    def variables(self) -> tuple[str, ...]:
        """Its variables, the first set winning as in llama.cpp's ``get_value_from_env``: ``LLAMA_ARG_NO_X`` (set
        at all: off) for a switch with off spellings, then ``LLAMA_ARG_X``."""
        if self.env is None:
            return ()
        if self.negative:
            return (self.env.replace("LLAMA_ARG_", "LLAMA_ARG_NO_", 1), self.env)
        return (self.env,)


def _options(disposition: Disposition, why: str, *rows: str) -> tuple[Option, ...]:
    """Options from help-like rows: ``-kvo --kv-offload / -nkvo --no-kv-offload $LLAMA_ARG_KV_OFFLOAD``."""
    options = []
    for row in rows:
        words = row.split()
        env = next((word[1:] for word in words if word.startswith("$")), None)
        names = [word for word in words if word.startswith("-")]
        cut = words.index("/") if "/" in words else len(words)
        negative = tuple(name for name in names if words.index(name) > cut)
        values = sum(1 for word in words if word[0] not in "-/$")
        options.append(Option(tuple(names), negative, values, env, disposition, why))
    return tuple(options)


_A, _D, _I, _L, _R = Disposition
_NOT_YET = "not implemented yet"
_REMOVED_DRAFT = "the argument has been removed. use --spec-draft-n-max or --spec-ngram-mod-n-max"
_SHORTCUT = "llama.cpp's shortcut downloads a fixed third-party model: name it with -hf or -m"

#: Every option of the pinned llama-server's ``--help`` (tests/settings/llama_server_help.txt), by disposition.
OPTIONS: tuple[Option, ...] = (
    *_options(_D, "prints lfmserve's help (its own flags too) and exits", "-h --help --usage"),
    *_options(
        _A,
        "",
        "--version",
        "-cl --cache-list",
        "-t --threads N $LLAMA_ARG_THREADS",
        "-tb --threads-batch N",
        "-c --ctx-size N $LLAMA_ARG_CTX_SIZE",
        "-n --predict --n-predict N $LLAMA_ARG_N_PREDICT",
        "-b --batch-size N $LLAMA_ARG_BATCH",
        "-ub --ubatch-size N $LLAMA_ARG_UBATCH",
        "--swa-full $LLAMA_ARG_SWA_FULL",
        "-lm --load-mode MODE $LLAMA_ARG_LOAD_MODE",
        "-lzm --lazy-mode MODE $LLAMA_ARG_LAZY_MODE",
        "-fa --flash-attn MODE $LLAMA_ARG_FLASH_ATTN",
        "--repack / -nr --no-repack $LLAMA_ARG_REPACK",
        "-ctk --cache-type-k TYPE $LLAMA_ARG_CACHE_TYPE_K",
        "-ctv --cache-type-v TYPE $LLAMA_ARG_CACHE_TYPE_V",
        "-ngl --gpu-layers --n-gpu-layers N $LLAMA_ARG_N_GPU_LAYERS",
        "-dev --device DEVICES $LLAMA_ARG_DEVICE",
        "-sm --split-mode MODE $LLAMA_ARG_SPLIT_MODE",
        "-ts --tensor-split SPLIT $LLAMA_ARG_TENSOR_SPLIT",
        "-mg --main-gpu INDEX $LLAMA_ARG_MAIN_GPU",
        "-cmoe --cpu-moe $LLAMA_ARG_CPU_MOE",
        "-ncmoe --n-cpu-moe N $LLAMA_ARG_N_CPU_MOE",
        "-ncffn --n-cpu-ffn N $LLAMA_ARG_N_CPU_FFN",
        "--no-host $LLAMA_ARG_NO_HOST",
        "-kvo --kv-offload / -nkvo --no-kv-offload $LLAMA_ARG_KV_OFFLOAD",
        "--op-offload / --no-op-offload",
        "--spec-draft-ngl -ngld --gpu-layers-draft --n-gpu-layers-draft N $LLAMA_ARG_N_GPU_LAYERS_DRAFT",
        "--spec-draft-device -devd --device-draft DEVICES",
        "--spec-draft-cpu-moe -cmoed --cpu-moe-draft $LLAMA_ARG_SPEC_DRAFT_CPU_MOE",
        "--spec-draft-n-cpu-moe --spec-draft-ncmoe -ncmoed --n-cpu-moe-draft N $LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE",
        "--lora FNAME",
        "-m --model FNAME $LLAMA_ARG_MODEL",
        "-hf -hfr --hf-repo REPO $LLAMA_ARG_HF_REPO",
        "-hff --hf-file FILE $LLAMA_ARG_HF_FILE",
        "-hft --hf-token TOKEN $HF_TOKEN",
        "--log-disable",
        "--log-file FNAME $LLAMA_ARG_LOG_FILE",
        "--log-jsonl / --no-log-jsonl $LLAMA_ARG_LOG_JSONL",
        "--log-colors MODE $LLAMA_ARG_LOG_COLORS",
        "-v --verbose --log-verbose",
        "--offline $LLAMA_ARG_OFFLINE",
        "-lv --verbosity --log-verbosity N $LLAMA_ARG_LOG_VERBOSITY",
        "--log-prefix / --no-log-prefix $LLAMA_ARG_LOG_PREFIX",
        "--log-timestamps / --no-log-timestamps $LLAMA_ARG_LOG_TIMESTAMPS",
        "-s --seed SEED",
        "--temp --temperature N $LLAMA_ARG_TEMPERATURE",
        "--top-k N $LLAMA_ARG_TOP_K",
        "--top-p N $LLAMA_ARG_TOP_P",
        "--min-p N $LLAMA_ARG_MIN_P",
        "--repeat-last-n N",
        "--repeat-penalty N $LLAMA_ARG_REPEAT_PENALTY",
        "-e --escape / --no-escape",
        "--rope-scaling TYPE $LLAMA_ARG_ROPE_SCALING_TYPE",
        "--rope-scale N $LLAMA_ARG_ROPE_SCALE",
        "--rope-freq-base N $LLAMA_ARG_ROPE_FREQ_BASE",
        "--rope-freq-scale N $LLAMA_ARG_ROPE_FREQ_SCALE",
        "--yarn-orig-ctx N $LLAMA_ARG_YARN_ORIG_CTX",
        "--yarn-ext-factor N $LLAMA_ARG_YARN_EXT_FACTOR",
        "--yarn-attn-factor N $LLAMA_ARG_YARN_ATTN_FACTOR",
        "--yarn-beta-slow N $LLAMA_ARG_YARN_BETA_SLOW",
        "--yarn-beta-fast N $LLAMA_ARG_YARN_BETA_FAST",
        "--check-tensors",
        "--warmup / --no-warmup",
        "-fit --fit MODE $LLAMA_ARG_FIT",
        "-fitt --fit-target MIB $LLAMA_ARG_FIT_TARGET",
        "-fitc --fit-ctx N $LLAMA_ARG_FIT_CTX",
        "--override-kv KEYS",
        "--control-vector FNAME",
        "--control-vector-scaled FNAME",
        "--control-vector-layer-range START END",
        "--ignore-eos",
        "--top-nsigma --top-n-sigma N",
        "--xtc-probability N",
        "--xtc-threshold N",
        "--typical --typical-p N",
        "--presence-penalty N $LLAMA_ARG_PRESENCE_PENALTY",
        "--frequency-penalty N $LLAMA_ARG_FREQUENCY_PENALTY",
        "--dry-multiplier N",
        "--dry-base N",
        "--dry-allowed-length N",
        "--dry-penalty-last-n N",
        "--dry-sequence-breaker STRING",
        "--adaptive-target N",
        "--adaptive-decay N",
        "--dynatemp-range N",
        "--dynatemp-exp N",
        "--mirostat N",
        "--mirostat-lr N",
        "--mirostat-ent N",
        "-l --logit-bias BIAS",
        "--grammar GRAMMAR",
        "--grammar-file FNAME",
        "-j --json-schema SCHEMA",
        "-jf --json-schema-file FILE",
        "--keep N",
        "--spec-draft-hf -hfd -hfrd --hf-repo-draft REPO $LLAMA_ARG_SPEC_DRAFT_HF_REPO",
        "--spec-draft-type-k -ctkd --cache-type-k-draft TYPE $LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K",
        "--spec-draft-type-v -ctvd --cache-type-v-draft TYPE $LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V",
        "--spec-draft-threads -td --threads-draft N",
        "--spec-draft-threads-batch -tbd --threads-batch-draft N",
        "--spec-draft-n-max N $LLAMA_ARG_SPEC_DRAFT_N_MAX",
        "--spec-draft-n-min N $LLAMA_ARG_SPEC_DRAFT_N_MIN",
        "--spec-synth-len L $LLAMA_ARG_SPEC_SYNTH_LEN",
        "--spec-synth-rates RATES $LLAMA_ARG_SPEC_SYNTH_RATES",
        "--spec-draft-p-min --draft-p-min P $LLAMA_ARG_SPEC_DRAFT_P_MIN",
        "--spec-draft-model -md --model-draft FNAME $LLAMA_ARG_SPEC_DRAFT_MODEL",
        "--spec-type TYPES $LLAMA_ARG_SPEC_TYPE",
        "--spec-default",
        "--spec-ngram-mod-n-min N",
        "--spec-ngram-mod-n-max N",
        "--spec-ngram-mod-n-match N",
        "--spec-ngram-simple-size-n N",
        "--spec-ngram-simple-size-m N",
        "--spec-ngram-simple-min-hits N",
        "--spec-ngram-map-k-size-n N",
        "--spec-ngram-map-k-size-m N",
        "--spec-ngram-map-k-min-hits N",
        "--spec-ngram-map-k4v-size-n N",
        "--spec-ngram-map-k4v-size-m N",
        "--spec-ngram-map-k4v-min-hits N",
        "-ctxcp --ctx-checkpoints --swa-checkpoints N $LLAMA_ARG_CTX_CHECKPOINTS",
        "-cram --cache-ram N $LLAMA_ARG_CACHE_RAM",
        "-kvu --kv-unified / -no-kvu --no-kv-unified $LLAMA_ARG_KV_UNIFIED",
        "--kv-unified-per-slot N $LLAMA_ARG_KV_UNIFIED_PER_SLOT",
        "--cache-idle-slots / --no-cache-idle-slots $LLAMA_ARG_CACHE_IDLE_SLOTS",
        "--context-shift / --no-context-shift $LLAMA_ARG_CONTEXT_SHIFT",
        "-r --reverse-prompt PROMPT",
        "--pooling TYPE $LLAMA_ARG_POOLING",
        "-np --parallel N $LLAMA_ARG_N_PARALLEL",
        "-mm --mmproj FILE $LLAMA_ARG_MMPROJ",
        "--mmproj-auto / --no-mmproj --no-mmproj-auto $LLAMA_ARG_MMPROJ_AUTO",
        "--mmproj-offload / --no-mmproj-offload $LLAMA_ARG_MMPROJ_OFFLOAD",
        "--image-min-tokens N $LLAMA_ARG_IMAGE_MIN_TOKENS",
        "--image-max-tokens N $LLAMA_ARG_IMAGE_MAX_TOKENS",
        "--video-fps N $LLAMA_ARG_VIDEO_FPS",
        "--video-timestamp-interval N $LLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL",
        "--video-ffmpeg-dir DIR $LLAMA_ARG_VIDEO_FFMPEG_DIR",
        "-a --alias STRING $LLAMA_ARG_ALIAS",
        "--tags STRING $LLAMA_ARG_TAGS",
        "--embd-normalize N",
        "--host HOST $LLAMA_ARG_HOST",
        "--port PORT $LLAMA_ARG_PORT",
        "--reuse-port $LLAMA_ARG_REUSE_PORT",
        "--cors-origins ORIGINS $LLAMA_ARG_CORS_ORIGINS",
        "--cors-methods METHODS $LLAMA_ARG_CORS_METHODS",
        "--cors-headers HEADERS $LLAMA_ARG_CORS_HEADERS",
        "--cors-credentials / --no-cors-credentials $LLAMA_ARG_CORS_CREDENTIALS",
        "--api-prefix PREFIX $LLAMA_ARG_API_PREFIX",
        "--ui-config --webui-config JSON $LLAMA_ARG_UI_CONFIG",
        "--ui-config-file --webui-config-file PATH $LLAMA_ARG_UI_CONFIG_FILE",
        "--ui --webui / --no-ui --no-webui $LLAMA_ARG_UI",
        "--rerank --reranking $LLAMA_ARG_RERANKING",
        "--api-key KEY $LLAMA_API_KEY",
        "--api-key-file FNAME $LLAMA_ARG_API_KEY_FILE",
        "--tools TOOLS $LLAMA_ARG_TOOLS",
        "--tools-runtime OPTION $LLAMA_ARG_TOOLS_RUNTIME",
        "--ui-mcp-proxy --webui-mcp-proxy / --no-ui-mcp-proxy --no-webui-mcp-proxy $LLAMA_ARG_UI_MCP_PROXY",
        "-ag --agent / -no-ag --no-agent $LLAMA_ARG_AGENT",
        "--mcp-servers-config PATH $LLAMA_ARG_MCP_SERVERS_CONFIG",
        "--mcp-servers-json JSON $LLAMA_ARG_MCP_SERVERS_JSON",
        "--ssl-key-file FNAME $LLAMA_ARG_SSL_KEY_FILE",
        "--ssl-cert-file FNAME $LLAMA_ARG_SSL_CERT_FILE",
        "--chat-template-kwargs STRING $LLAMA_ARG_CHAT_TEMPLATE_KWARGS",
        "--sse-ping-interval N $LLAMA_ARG_SSE_PING_INTERVAL",
        "--cache-prompt / --no-cache-prompt $LLAMA_ARG_CACHE_PROMPT",
        "--cache-reuse N $LLAMA_ARG_CACHE_REUSE",
        "--metrics $LLAMA_ARG_ENDPOINT_METRICS",
        "--props $LLAMA_ARG_ENDPOINT_PROPS",
        "--slots / --no-slots $LLAMA_ARG_ENDPOINT_SLOTS",
        "--slot-save-path PATH",
        "--media-path PATH",
        "--models-dir PATH $LLAMA_ARG_MODELS_DIR",
        "--models-preset PATH $LLAMA_ARG_MODELS_PRESET",
        "--models-max N $LLAMA_ARG_MODELS_MAX",
        "--models-autoload / --no-models-autoload $LLAMA_ARG_MODELS_AUTOLOAD",
        "--jinja / --no-jinja $LLAMA_ARG_JINJA",
        "--reasoning-format FORMAT $LLAMA_ARG_THINK",
        "-rea --reasoning MODE $LLAMA_ARG_REASONING",
        "--reasoning-effort LEVEL $LLAMA_ARG_REASONING_EFFORT",
        "--reasoning-budget N $LLAMA_ARG_THINK_BUDGET",
        "--reasoning-budget-message MESSAGE $LLAMA_ARG_THINK_BUDGET_MESSAGE",
        "--chat-template TEMPLATE $LLAMA_ARG_CHAT_TEMPLATE",
        "--chat-template-file FILE $LLAMA_ARG_CHAT_TEMPLATE_FILE",
        "--skip-chat-parsing / --no-skip-chat-parsing $LLAMA_ARG_SKIP_CHAT_PARSING",
        "--prefill-assistant / --no-prefill-assistant $LLAMA_ARG_PREFILL_ASSISTANT",
        "-sps --slot-prompt-similarity SIMILARITY",
        "--lora-init-without-apply",
        "--sleep-idle-seconds SECONDS",
    ),
    *_options(
        _D,
        "off unless given: past reasoning stays in the prompt only where asked, as the templates' authors render it "
        "(llama-server turns it on)",
        "--reasoning-preserve / --no-reasoning-preserve $LLAMA_ARG_REASONING_PRESERVE",
    ),
    *_options(
        _D,
        "also as FILE:SCALE, comma-separated, besides FILE SCALE: one value, as a preset writes it",
        "--lora-scaled X",
    ),
    *_options(
        _D, "accepted: sampling runs on the CPU either way", "-bs --backend-sampling $LLAMA_ARG_BACKEND_SAMPLING"
    ),
    *_options(
        _D,
        "an unknown sampler name or letter stops the start naming it (llama-server drops it with a warning)",
        "--samplers SAMPLERS",
        "--sampler-seq --sampling-seq SEQUENCE",
    ),
    *_options(
        _D,
        "continuous batching is always on: -nocb is accepted and has no effect",
        "-cb --cont-batching / -nocb --no-cont-batching $LLAMA_ARG_CONT_BATCHING",
    ),
    *_options(
        _D,
        "also serves /v1/embeddings and /embedding beside chat and completions (llama-server serves embeddings only)",
        "--embedding --embeddings $LLAMA_ARG_EMBEDDINGS",
    ),
    *_options(_D, "accepted: uvicorn has no socket read/write timeout", "-to --timeout N $LLAMA_ARG_TIMEOUT"),
    *_options(_D, "accepted: requests are served by asyncio", "--threads-http N $LLAMA_ARG_THREADS_HTTP"),
    *_options(
        _D,
        "prints llama-server's list (the devices -dev takes), then the CPU's devices in the same form",
        "--list-devices",
    ),
    *_options(
        _D,
        "first match wins, its patterns before those of the --cpu-moe, --n-cpu-moe and --n-cpu-ffn given (llama-server"
        " keeps them in the order given)",
        "-ot --override-tensor PATTERNS $LLAMA_ARG_OVERRIDE_TENSOR",
        "--spec-draft-override-tensor -otd --override-tensor-draft PATTERNS",
    ),
    *_options(
        _D,
        "a device named wins over --no-mmproj-offload, whatever their order (llama-server: the later given)",
        "-mmdev --mmproj-device DEVICE $MTMD_BACKEND_DEVICE",
    ),
    *_options(_I, "deprecated: llama-server ignores it too", "-dt --defrag-thold N $LLAMA_ARG_DEFRAG_THOLD"),
    *_options(
        _I,
        "the draft model samples on the CPU either way",
        "--spec-draft-backend-sampling / --no-spec-draft-backend-sampling $LLAMA_ARG_SPEC_DRAFT_BACKEND_SAMPLING",
    ),
    *_options(
        _A,
        "",
        "--numa TYPE $LLAMA_ARG_NUMA",
        "-C --cpu-mask M",
        "-Cr --cpu-range RANGE",
        "--cpu-strict N",
        "--prio N",
        "--poll N",
    ),
    *_options(
        _D,
        "one not given takes its generation flag's value, as the help says (llama-server's batch pool copies the "
        "generation pool's placement whole unless -tb is given)",
        "-Cb --cpu-mask-batch M",
        "-Crb --cpu-range-batch RANGE",
        "--cpu-strict-batch N",
        "--prio-batch N",
        "--poll-batch N",
    ),
    *_options(
        _D,
        "placed on the draft model's own context as the help says, one not given taking the target's flag (a batch "
        "one: the draft's); llama-server at the pin reads them but makes its draft context without threadpools",
        "--spec-draft-cpu-mask -Cd --cpu-mask-draft M",
        "--spec-draft-cpu-range -Crd --cpu-range-draft RANGE",
        "--spec-draft-cpu-strict --cpu-strict-draft N",
        "--spec-draft-prio --prio-draft N",
        "--spec-draft-poll --poll-draft N",
        "--spec-draft-cpu-mask-batch -Cbd --cpu-mask-batch-draft M",
        "--spec-draft-cpu-strict-batch --cpu-strict-batch-draft N",
        "--spec-draft-prio-batch --prio-batch-draft N",
        "--spec-draft-poll-batch --poll-batch-draft N",
    ),
    *_options(
        _L,
        "the draft model's p-split: " + _NOT_YET,
        "--spec-draft-p-split --draft-p-split P $LLAMA_ARG_SPEC_DRAFT_P_SPLIT",
    ),
    *_options(
        _L,
        _NOT_YET,
        "--perf / --no-perf $LLAMA_ARG_PERF",
        "--rpc SERVERS $LLAMA_ARG_RPC",
        "-lcs --lookup-cache-static FNAME",
        "-lcd --lookup-cache-dynamic FNAME",
        "-cms --checkpoint-min-step N $LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT",
        "-sp --special",
        "--spm-infill",
        "--mtmd-batch-max-tokens N $LLAMA_ARG_MTMD_BATCH_MAX_TOKENS",
        "--path PATH $LLAMA_ARG_STATIC_PATH",
        "--log-prompts-dir PATH",
    ),
    *_options(
        _R,
        "downloads by URL are not supported by lfmserve: use -hf or -m",
        "-mu --model-url URL $LLAMA_ARG_MODEL_URL",
        "-mmu --mmproj-url URL $LLAMA_ARG_MMPROJ_URL",
    ),
    *_options(
        _R,
        "Docker Hub downloads are not supported by lfmserve: models come from Hugging Face (-hf) or a file (-m)",
        "-dr --docker-repo REPO $LLAMA_ARG_DOCKER_REPO",
    ),
    *_options(_R, "prints llama.cpp's bash completion script, which lists llama-server's flags", "--completion-bash"),
    *_options(_R, _REMOVED_DRAFT, "--draft --draft-n --draft-max N $LLAMA_ARG_DRAFT_MAX"),
    *_options(
        _R,
        "the argument has been removed. use --spec-draft-n-min or --spec-ngram-mod-n-min",
        "--draft-min --draft-n-min N $LLAMA_ARG_DRAFT_MIN",
    ),
    *_options(_R, "the argument has been removed. use the respective --spec-ngram-*-size-n", "--spec-ngram-size-n N"),
    *_options(_R, "the argument has been removed. use the respective --spec-ngram-*-size-m", "--spec-ngram-size-m N"),
    *_options(
        _R, "the argument has been removed. use the respective --spec-ngram-*-min-hits", "--spec-ngram-min-hits N"
    ),
    *_options(
        _R,
        _SHORTCUT,
        "--embd-gemma-default",
        "--fim-qwen-1.5b-default",
        "--fim-qwen-3b-default",
        "--fim-qwen-7b-default",
        "--fim-qwen-7b-spec",
        "--fim-qwen-14b-spec",
        "--fim-qwen-30b-default",
        "--gpt-oss-20b-default",
        "--gpt-oss-120b-default",
        "--vision-gemma-4b-default",
        "--vision-gemma-12b-default",
    ),
)

#: ``-h``, ``--help``, ``--usage``: argparse's help action, so the parser adds it itself.
HELP = OPTIONS[0]
#: The variables that turn a switch off when set at all (``LLAMA_ARG_NO_JINJA``).
NEGATIVE_VARIABLES = frozenset(option.variables[0] for option in OPTIONS if option.negative and option.env)
#: Each spelling -> its option.
_BY_SPELLING = {spelling: option for option in OPTIONS for spelling in option.spellings}


def option_of(spelling: str) -> Option | None:
    """The llama-server option a spelling (``-sm``, ``--no-jinja``) belongs to; None for lfmserve's own flags."""
    return _BY_SPELLING.get(spelling)


def taken(option: Option) -> bool:
    """Whether the settings' fields take the option (applied, or applied differently)."""
    return option.disposition in (Disposition.APPLIED, Disposition.DIFFERENT)


def ignored_line(names: Iterable[str]) -> str:
    """The start-up warning for the ignored flags and variables given, each with its option's reason:
    ``ignored: -sm, -mg (device placement: ...); -dt (deprecated: ...)``."""
    reasons: dict[str, list[str]] = {}
    for name in names:
        option = _BY_SPELLING.get(name) or next(o for o in OPTIONS if name in o.variables)
        reasons.setdefault(option.why, []).append(name)
    return "llama-server options ignored: " + "; ".join(f"{', '.join(n)} ({why})" for why, n in reasons.items())
