"""Speculative decoding benchmark: decode speed with and without ``--spec-type``, lfmserve vs llama-server.

Four servers per model, the same flags (4 slots of 3,072 tokens): llama-server and lfmserve, each without and
with ``--spec-type ngram-simple``. Raw ``/completion`` prompts, 256 tokens each; a workload named ``... x4`` sends
four of them at once and reports their tokens over the time until the last one ends.

On Gemma-3-270M (real text: random weights cannot copy; a base model): greedy ``fix`` (a ~1,500-token
document with typos, then the same text fixed), ``copy`` (the document, then "Copy:" and its first three
words) and ``json`` (its paragraphs as a JSON array of strings, which quotes them); and ``free``, sampled
free writing (temperature 0.8, seed 1): the control, where drafts are rarely right and speculation must
not cost.

On the LFM2-350M-shaped model (random weights, hybrid: its recurrent state is rolled back after each
rejected draft): ``free`` again, and ``list``, greedy under a grammar that allows only a list of three
words, with 2-token n-grams (``--spec-ngram-simple-size-n 2``): the reply repeats itself, so the drafter
guesses at nearly every step, and the grammar masks every verified position: drafting, grammar-checked
verification and rollback on a hybrid model.

The figure is ``timings.predicted_per_second`` (decode only; both servers report it), medians of
``--repeats`` runs, servers alternating within each workload.

Example::

    python bench/spec_bench.py --build
"""

from __future__ import annotations

import contextlib
import inspect
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from common import (
    Runs,
    Server,
    bench_arguments,
    bench_model,
    lfmserve_command,
    llama_server_binary,
    results_log,
    run_interleaved,
    settle,
)
from serve_bench import table

from lfmserve.testing import gemma3_270m_path

SPEC = ["--spec-type", "ngram-simple"]
MAX_TOKENS = 256


def document() -> str:
    """A fixed ~1,500-token English text: the documentation of Python's ``json`` module and its classes."""
    parts = [inspect.getdoc(json), inspect.getdoc(json.JSONEncoder), inspect.getdoc(json.JSONDecoder)]
    return "\n\n".join(p for p in parts if p)


TYPOS = document().replace("the ", "teh ")
WORKLOADS: dict[str, dict[str, Any]] = {
    "fix": {  # repeat a document with its typos fixed: nearly all of it is copied
        "prompt": f"Text with typos:\n\n{TYPOS}\n\nThe same text with the typos fixed:\n\n",
        "temperature": 0,
    },
    # Repeat the document. A base model left to begin the copy itself wanders off into a loop of its own
    # (measured: ">>> import json" then made-up keyword lists); begun with the document's first three words,
    # it copies it.
    "copy": {"prompt": f"Original:\n\n{document()}\n\nCopy:\n\n{' '.join(document().split()[:3])}", "temperature": 0},
    "json": {  # JSON over the document, which quotes it
        "prompt": f'{document()}\n\nThe paragraphs above as a JSON array of strings:\n\n["',
        "temperature": 0,
    },
    # The control: sampled free writing, where drafts are rarely right (greedy, this small model loops).
    "free": {"prompt": "Once upon a time, in a small village by the sea,", "temperature": 0.8, "seed": 1},
    # Three words over and over: 2-token n-grams draft at nearly every step.
    "list": {
        "prompt": "A list of fruit: ",
        "temperature": 0,
        "grammar": 'root ::= ("apples, " | "pears, " | "plums, ")+',
    },
}
#: Each model, its workloads and the flags both servers add for speculation. A ``x4`` workload is four requests
#: of its kind at once (each server has 4 slots): drafting must not cost the other streams.
MODELS: dict[str, tuple[tuple[str, ...], list[str]]] = {
    "gemma-3-270m": (("fix", "copy", "json", "free", "copy x4", "free x4"), SPEC),
    "lfm2-350m-shaped": (("free", "list", "free x4"), [*SPEC, "--spec-ngram-simple-size-n", "2"]),
}
STREAMS = 4


def run_one(url: str, workload: str, rep: int) -> dict[str, Any]:
    """One workload: its decode tok/s (``x4``: the four streams' tokens over the time until the last ends, prompts
    included, as each would see it)."""
    kind, _, times = workload.partition(" x")
    if not times:
        return _completion(url, kind, rep)
    with ThreadPoolExecutor(STREAMS) as pool:
        t0 = time.perf_counter()
        results = list(pool.map(lambda i: _completion(url, kind, rep, seed=i), range(STREAMS)))
        wall = time.perf_counter() - t0
    total = {key: sum(r[key] for r in results) for key in ("predicted_n", "draft_n", "draft_n_accepted")}
    return {"decode_tok_s": total["predicted_n"] / wall, **total}


def _completion(url: str, workload: str, rep: int, seed: int = 1) -> dict[str, Any]:
    body = {**WORKLOADS[workload], "n_predict": MAX_TOKENS, "ignore_eos": True}
    if "seed" in body:
        body["seed"] = seed  # four streams write four stories
    reply = httpx.post(url + "/completion", json=body, timeout=600).json()
    timings = reply["timings"]
    return {
        "decode_tok_s": timings["predicted_per_second"],
        "predicted_n": timings["predicted_n"],
        "draft_n": timings.get("draft_n", 0),
        "draft_n_accepted": timings.get("draft_n_accepted", 0),
    }


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=4 * 3072, repeats=3)
    parser.add_argument("--only", nargs="*", choices=list(MODELS), help="run these models only")
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    paths = {"gemma-3-270m": str(gemma3_270m_path()), "lfm2-350m-shaped": str(bench_model())}
    runs: Runs = {}
    with results_log(args, "spec") as log:
        for model, (workloads, spec) in MODELS.items():
            if args.only and model not in args.only:
                continue
            flags = ["-m", paths[model], "-c", str(args.ctx_size), "-t", str(args.threads), "-np", str(STREAMS)]
            servers = {"llama-server": [], "llama-server+spec": spec, "lfmserve": [], "lfmserve+spec": spec}
            with contextlib.ExitStack() as stack:
                urls, started = {}, []
                for name, extra in servers.items():
                    command = str(binary) if name.startswith("llama-server") else lfmserve_command()
                    started.append(Server(name, [command, *flags, *extra]))
                    urls[f"{model}/{name}"] = stack.enter_context(started[-1])
                print(f"servers idle after {settle(s.process.pid for s in started):.1f} s", flush=True)
                run_interleaved(urls, workloads, args.repeats, run_one, log, runs)
    medians = {
        server: {w: statistics.median(r["decode_tok_s"] for r in results) for w, results in by.items()}
        for server, by in runs.items()
    }
    # The table's two columns are llama-server and lfmserve; its rows are each workload without and with drafts.
    columns: dict[str, dict[str, Any]] = {"llama-server": {}, "lfmserve": {}}
    rows = []
    measured = {model: m for model, m in MODELS.items() if not args.only or model in args.only}
    for model, (workloads, _) in measured.items():
        for w in workloads:
            for name, by in columns.items():
                by[f"{model}:{w}"] = {
                    "plain": medians[f"{model}/{name}"][w],
                    "spec": medians[f"{model}/{name}+spec"][w],
                }
            rows += [(f"decode tok/s, {model}, {w}, {kind}", f"{model}:{w}.{kind}") for kind in ("plain", "spec")]
    print(table(columns, rows))
    for model, (workloads, _) in measured.items():
        for w in workloads:
            own = medians[f"{model}/lfmserve+spec"][w] / medians[f"{model}/lfmserve"][w]
            theirs = medians[f"{model}/llama-server+spec"][w] / medians[f"{model}/llama-server"][w]
            print(f"{model} {w}: lfmserve+spec / lfmserve {own:.2f}, llama-server+spec / llama-server {theirs:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
