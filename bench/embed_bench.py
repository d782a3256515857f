"""Embedding and reranking benchmark: lfmserve vs llama-server, many inputs in one request.

Both servers load the same model with the same flags (``-c``, ``-ub``, ``-np``, threads, and
``--embeddings --pooling mean`` or ``--rerank``), and are sent the same request in turn (alternating which
goes first); the figure is the request's wall time, reported as inputs per second (medians of
``--repeats``). Embeddings, 64 short texts in one ``/v1/embeddings`` request: the LFM2-350M-shaped Q4_K_M
model (hybrid: lfmserve embeds one input per decode there) and the real Gemma-3-270M (attention only:
inputs packed into as few decodes as fit). Reranking, 16 documents of 46-151 words in one ``/rerank``
request, on a Qwen3-Reranker-0.6B-shaped random model (one pair per decode). That the vectors and scores
agree is tested (``pytest -m slow tests/api/test_embeddings.py tests/api/test_rerank.py``), not measured.

Example::

    python bench/embed_bench.py --build
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import httpx
from common import (
    Runs,
    Server,
    bench_arguments,
    bench_model,
    bench_reranker,
    lfmserve_command,
    llama_server_binary,
    results_log,
    run_interleaved,
)
from serve_bench import table

from lfmserve.testing import gemma3_270m_path

N_TEXTS = 64
N_DOCUMENTS = 16


def texts(rep: int) -> list[str]:
    """Short camera-event descriptions, different in every run."""
    return [
        f"camera {i % 4}: a person walks past the front door at {rep}:{i:02d} carrying parcel {i * 7}"
        for i in range(N_TEXTS)
    ]


def embed(url: str, rep: int) -> float:
    """The wall time of one request embedding :func:`texts` (every vector checked to be there)."""
    t0 = time.perf_counter()
    reply = httpx.post(url + "/v1/embeddings", json={"input": texts(rep)}, timeout=600).json()
    wall = time.perf_counter() - t0
    assert len(reply["data"]) == N_TEXTS, reply
    return wall


def documents(rep: int) -> list[str]:
    """Event descriptions of growing length (46 to 151 words), different in every run."""
    sentence = "A person in a dark coat walks up the drive, stops at the door and leaves a parcel on the step. "
    return [f"Camera {i % 4} at {rep}:{i:02d}. " + sentence * (2 + i // 3) for i in range(N_DOCUMENTS)]


def rerank(url: str, rep: int) -> float:
    """The wall time of one request ranking :func:`documents` (every score checked to be there)."""
    t0 = time.perf_counter()
    body = {"query": f"who left a parcel at {rep}?", "documents": documents(rep)}
    reply = httpx.post(url + "/rerank", json=body, timeout=600).json()
    wall = time.perf_counter() - t0
    assert len(reply["results"]) == N_DOCUMENTS, reply
    return wall


class Scenario(NamedTuple):
    model: Callable[[], Path]
    flags: list[str]
    request: Callable[[str, int], float]
    n_inputs: int
    label: str


EMBEDDINGS = ["--embeddings", "--pooling", "mean"]
SCENARIOS = {
    "lfm2-350m-shaped": Scenario(bench_model, EMBEDDINGS, embed, N_TEXTS, f"{N_TEXTS} texts embedded"),
    "gemma-3-270m": Scenario(gemma3_270m_path, EMBEDDINGS, embed, N_TEXTS, f"{N_TEXTS} texts embedded"),
    "qwen3-reranker-600m-shaped": Scenario(
        bench_reranker, ["--rerank"], rerank, N_DOCUMENTS, f"{N_DOCUMENTS} documents ranked"
    ),
}
ROWS = [(f"inputs/s, {s.label} in one request, {name}", f"{name}.inputs_per_s") for name, s in SCENARIOS.items()]


def run_one(url: str, scenario: str, rep: int) -> dict[str, Any]:
    request = SCENARIOS[scenario].request
    request(url, 1000 + rep)  # warm: the first request of a run pays for nothing of the next
    wall = request(url, rep)
    return {"inputs_per_s": SCENARIOS[scenario].n_inputs / wall, "wall_s": wall}


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=8192, repeats=5)
    parser.add_argument("--ubatch", type=int, default=512)
    parser.add_argument("--only", nargs="*", choices=list(SCENARIOS), help="run these scenarios only")
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    runs: Runs = {}
    with results_log(args, "embed") as log:
        for name, scenario in SCENARIOS.items():
            if args.only and name not in args.only:
                continue
            flags = ["-m", str(scenario.model()), "-c", str(args.ctx_size), "-t", str(args.threads)]
            flags += ["-ub", str(args.ubatch), "-np", "4", *scenario.flags]
            servers = [Server("llama-server", [str(binary), *flags]), Server("lfmserve", [lfmserve_command(), *flags])]
            with contextlib.ExitStack() as stack:
                urls = {srv.name: stack.enter_context(srv) for srv in servers}
                run_interleaved(urls, [name], args.repeats, run_one, log, runs)
    medians = {
        server: {
            name: {key: statistics.median(r[key] for r in results) for key in results[0]}
            for name, results in by.items()
        }
        for server, by in runs.items()
    }
    print(table(medians, ROWS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
