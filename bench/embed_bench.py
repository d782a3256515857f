"""Embedding benchmark: lfmserve vs llama-server, 64 short texts in one ``/v1/embeddings`` request.

Both servers load the same model with ``--embeddings --pooling mean`` and the same ``-c``, ``-ub``, ``-np``
and threads, and are sent the same request in turn (alternating which goes first); the figure is the
request's wall time, reported as inputs per second (medians of ``--repeats``). Two models: the
LFM2-350M-shaped Q4_K_M one (hybrid: lfmserve embeds one input per decode there) and the real
Gemma-3-270M (attention only: inputs packed into as few decodes as fit). That the vectors agree is tested
(``pytest -m slow tests/api/test_embeddings.py``), not measured here.

Example::

    python bench/embed_bench.py --build
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
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
)
from serve_bench import table

from lfmserve.testing import gemma3_270m_path

MODELS = {"lfm2-350m-shaped": bench_model, "gemma-3-270m": gemma3_270m_path}
N_TEXTS = 64
ROWS = [(f"inputs/s, {N_TEXTS} texts in one request, {name}", f"{name}.inputs_per_s") for name in MODELS]


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


def run_one(url: str, scenario: str, rep: int) -> dict[str, Any]:
    embed(url, 1000 + rep)  # warm: the first request of a run pays for nothing of the next
    wall = embed(url, rep)
    return {"inputs_per_s": N_TEXTS / wall, "wall_s": wall}


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=8192, repeats=5)
    parser.add_argument("--ubatch", type=int, default=512)
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    runs: Runs = {}
    with results_log(args, "embed") as log:
        for name, model in MODELS.items():
            flags = ["-m", str(model()), "-c", str(args.ctx_size), "-t", str(args.threads), "-ub", str(args.ubatch)]
            flags += ["-np", "4", "--embeddings", "--pooling", "mean"]
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
