"""``--fit`` parity: the context lfmserve fits a ``-c``-less model into, against llama-server's (built from the same
llama.cpp), margin by margin.

Both servers load a tiny LFM2 model trained on 32768 tokens (random weights, written by ``lfmserve.testing``;
``-np 4 -kvu -t 1``: one stream, so both start from the same full context) with ``--fit-target`` set so that
host memory less the margin holds: everything, a context between the full one and ``--fit-ctx``'s 4096 (three
margins), and not even the minimum. For each margin the table gives ``/props``' ``n_ctx`` of both; they must be
equal. Exits 1 when any differs.

Example::

    python bench/fit_parity.py                      # llama-server from the bench cache (or --build)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import httpx
from common import Server, bench_arguments, lfmserve_command, llama_server_binary, results_log

from lfmserve.loading.engine_config import engine_config
from lfmserve.loading.fit import host_memory, used_bytes
from lfmserve.loading.model_load import load_model
from lfmserve.settings import Settings
from lfmserve.testing import TinyLfm2, write_lfm2_gguf

FLAGS = ["-np", "4", "-kvu", "-t", "1"]
MIB = 2**20


def _used(model_path: str) -> tuple[int, int]:
    """Bytes lfmserve measures at --fit-ctx's minimum (4096) and at the full context (32768)."""
    settings = Settings.from_argv(["-m", model_path, *FLAGS], environ={})
    config = engine_config(settings)
    probe = load_model(settings, model_path, no_alloc=True)
    try:
        return used_bytes(probe, config, 4096), used_bytes(probe, config, 32768)
    finally:
        probe.close()


def _n_ctx(name: str, argv: list[str]) -> int:
    with Server(name, argv) as url:
        props = httpx.get(url + "/props", timeout=30).json()
    return int(props["default_generation_settings"]["n_ctx"])


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=0, repeats=1)
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    with tempfile.TemporaryDirectory() as folder:
        model = str(write_lfm2_gguf(Path(folder) / "long.gguf", TinyLfm2(seed=3, context_length=32768)))
        low, high = _used(model)
        total = host_memory()
        # Room for everything, for three points between the two measures, and for nothing.
        room = [high, (3 * high + low) // 4, (high + low) // 2, (high + 3 * low) // 4, 0]
        margins = [(total - used) // MIB for used in room]
        print(f"host {total // MIB} MiB; lfmserve measures {low / MIB:.1f} MiB at 4096 tokens, {high / MIB:.1f} MiB")
        print("| --fit-target (MiB) | llama-server n_ctx | lfmserve n_ctx |\n| --- | --- | --- |")
        differing = 0
        with results_log(args, "fit_parity") as out:
            for margin in margins:
                fit = ["--fit-target", str(margin)]
                theirs = _n_ctx("llama-server", [str(binary), "-m", model, *FLAGS, *fit])
                ours = _n_ctx("lfmserve", [lfmserve_command(), "-m", model, *FLAGS, *fit])
                differing += theirs != ours
                print(f"| {margin} | {theirs} | {ours} |")
                out.write(f'{{"fit_target_mib": {margin}, "llama_server": {theirs}, "lfmserve": {ours}}}\n')
    print(f"verdict: {'SAME' if not differing else 'DIFFERENT'}: {differing} of {len(margins)} margin(s) differ")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
