"""Speculative decoding benchmark: decode speed with and without ``--spec-type``, lfmserve vs llama-server.

Four servers on Gemma-3-270M (real text: random weights cannot copy), the same flags: llama-server and
lfmserve, each without and with ``--spec-type ngram-simple``. Raw ``/completion`` prompts (the model is
a base model), 256 tokens each: greedy ``fix`` (a ~1,500-token document with typos, then the same text
fixed), ``copy`` (the document, then "Copy:") and ``json`` (its paragraphs as a JSON array of strings,
which quotes them); and ``free``, sampled free writing (temperature 0.8, seed 1): the control, where
drafts are rarely right and speculation must not cost.
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
from typing import Any

import httpx
from common import Runs, Server, bench_arguments, lfmserve_command, llama_server_binary, results_log, run_interleaved
from serve_bench import table

from lfmserve.testing import gemma3_270m_path

SPEC = ["--spec-type", "ngram-simple"]
SERVERS = {"llama-server": [], "llama-server+spec": SPEC, "lfmserve": [], "lfmserve+spec": SPEC}
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
    "copy": {"prompt": f"Original:\n\n{document()}\n\nCopy:\n\n", "temperature": 0},
    "json": {  # JSON over the document, which quotes it
        "prompt": f'{document()}\n\nThe paragraphs above as a JSON array of strings:\n\n["',
        "temperature": 0,
    },
    # The control: sampled free writing, where drafts are rarely right (greedy, this small model loops).
    "free": {"prompt": "Once upon a time, in a small village by the sea,", "temperature": 0.8, "seed": 1},
}
ROWS = [
    *((f"decode tok/s, {name}, {server}", f"{name}.{server}") for name in WORKLOADS for server in ("plain", "spec")),
]


def run_one(url: str, workload: str, rep: int) -> dict[str, Any]:
    body = {**WORKLOADS[workload], "n_predict": MAX_TOKENS, "ignore_eos": True}
    reply = httpx.post(url + "/completion", json=body, timeout=600).json()
    timings = reply["timings"]
    return {
        "decode_tok_s": timings["predicted_per_second"],
        "predicted_n": timings["predicted_n"],
        "draft_n": timings.get("draft_n", 0),
        "draft_n_accepted": timings.get("draft_n_accepted", 0),
    }


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=8192, repeats=3)
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    flags = ["-m", str(gemma3_270m_path()), "-c", str(args.ctx_size), "-t", str(args.threads), "-np", "1"]
    runs: Runs = {}
    with results_log(args, "spec") as log, contextlib.ExitStack() as stack:
        urls = {}
        for name, extra in SERVERS.items():
            command = str(binary) if name.startswith("llama-server") else lfmserve_command()
            urls[name] = stack.enter_context(Server(name, [command, *flags, *extra]))
        run_interleaved(urls, list(WORKLOADS), args.repeats, run_one, log, runs)
    medians = {
        server: {w: statistics.median(r["decode_tok_s"] for r in results) for w, results in by.items()}
        for server, by in runs.items()
    }
    # The table's two columns are llama-server and lfmserve; its rows are each workload without and with drafts.
    columns = {
        name: {w: {"plain": medians[name][w], "spec": medians[f"{name}+spec"][w]} for w in WORKLOADS}
        for name in ("llama-server", "lfmserve")
    }
    print(table(columns, ROWS))
    for w in WORKLOADS:
        own = medians["lfmserve+spec"][w] / medians["lfmserve"][w]
        theirs = medians["llama-server+spec"][w] / medians["llama-server"][w]
        print(f"{w}: lfmserve+spec / lfmserve {own:.2f}, llama-server+spec / llama-server {theirs:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
