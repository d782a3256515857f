"""Where a start's time goes: each phase of lfmserve's start timed on its own, beside llama-server's phases from its
log, and both servers' time to a first answer.

lfmserve's phases are timed in a fresh process each run, in the order a start runs them (``cli.serve_model``):
the interpreter (``python -c pass``, its own process), lfmserve's command line imported and the flags parsed, the
start's checks (engine settings, devices, files) with their imports, the weights loaded (``load_weights``:
``--fit``, llama.cpp's load, ``-lm auto``'s release of mapped pages), the chat and engine layers imported, the
engine made (its context and warm-up: ``serving_of``), and the app imported and built. In a real start the app's
import and build run beside the load, on the main thread, so the phases add up to more than the start.
llama-server's phases are read from its ``--log-timestamps`` lines (its log's clock starts with the process):
the load begun, the model loaded and its slots ready, listening. The first answer of each is
``start_bench.py``'s measure: from the process's start to the answer of a 1-token ``/completion``.

Gemma-3-270M, ``-c 4096 -np 2 -t 2``; medians of ``--repeats`` runs, the servers alternating.

Example::

    python bench/start_phases.py --llama-server ~/.cache/lfmserve-bench/llama.cpp-build/bin/llama-server
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import bench_arguments, lfmserve_command, llama_server_binary, results_log
from start_bench import time_to_first_answer

from lfmserve.testing import gemma3_270m_path, llama_server_weight_flags

#: lfmserve's start, phase by phase, in a fresh process: a JSON object of each phase's seconds on stdout.
PHASES = r"""
import json, sys, time
t = [time.perf_counter()]
from lfmserve.settings import Settings
import lfmserve.cli
settings = Settings.from_argv(sys.argv[1:], environ={})
t.append(time.perf_counter())
from lfmserve.api.sockets import tls_files
from lfmserve.loading.engine_config import engine_config
from lfmserve.loading.files import resolve_model_files
from lfmserve.loading.placement import check_placement
engine_config(settings, settings.speculation.spec_draft_hf)
check_placement(settings)
files = resolve_model_files(settings)
tls_files(settings.server)
t.append(time.perf_counter())
from lfmserve.loading.model_load import load_weights
fitted, model = load_weights(settings, files)
t.append(time.perf_counter())
from lfmserve.loading.loader import serving_of
t.append(time.perf_counter())
serving = serving_of(fitted, model, files)
t.append(time.perf_counter())
from lfmserve.api.app import create_app
from lfmserve.api.server import Server
create_app(settings, lambda: serving)
t.append(time.perf_counter())
serving.close()
names = ["imports and flags", "start checks", "weights loaded", "chat and engine imported", "engine made",
         "app imported and built"]
print(json.dumps({name: b - a for name, a, b in zip(names, t, t[1:])}))
"""

#: llama-server's lines that end its phases, and the phase each ends.
LLAMA_SERVER_MARKS = {
    "load_model: loading model": "up to the load",
    "llama_server: model loaded": "model loaded, slots ready",
    "llama_server: listening on": "listening",
}
_STAMP = re.compile(r"^(\d+)\.(\d\d)\.(\d\d\d)\.(\d\d\d) ")


def lfmserve_phases(flags: list[str]) -> dict[str, float]:
    """One lfmserve start, phase by phase, in a fresh process (the interpreter's own start timed apart)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    interpreter = time.perf_counter() - started
    out = subprocess.run([sys.executable, "-c", PHASES, *flags], check=True, capture_output=True, text=True).stdout
    return {"interpreter": interpreter, **json.loads(out.strip().splitlines()[-1])}


def llama_server_phases(log: Path) -> dict[str, float]:
    """The seconds at which llama-server's log says each phase ended (its clock starts with the process)."""
    ended: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        stamp = _STAMP.match(line)
        for mark, phase in LLAMA_SERVER_MARKS.items():
            if stamp and mark in line and phase not in ended:
                minutes, seconds, ms, us = (int(part) for part in stamp.groups())
                ended[phase] = minutes * 60 + seconds + ms / 1e3 + us / 1e6
    return ended


def main() -> int:
    parser = bench_arguments(__doc__ or "", ctx_size=4096, repeats=5)
    args = parser.parse_args()
    binary = llama_server_binary(parser, args)
    flags = ["-m", str(gemma3_270m_path()), "-c", str(args.ctx_size), "-np", "2", "-t", str(args.threads)]
    servers = {
        "llama-server": [str(binary), *flags, *llama_server_weight_flags(), "--log-timestamps"],
        "lfmserve": [lfmserve_command(), *flags],
    }
    phases: dict[str, dict[str, list[float]]] = {"llama-server": {}, "lfmserve": {}}
    with results_log(args, "start_phases") as results, tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for name in list(servers) if rep % 2 == 0 else list(servers)[::-1]:
                log = Path(tmp) / f"{name}-{rep}.log"
                answered = time_to_first_answer(servers[name], log)
                seen = llama_server_phases(log) if name == "llama-server" else lfmserve_phases(flags)
                for phase, seconds in {**seen, "first answer": answered}.items():
                    phases[name].setdefault(phase, []).append(seconds)
                results.write(json.dumps({"server": name, "rep": rep, **seen, "first answer": answered}) + "\n")
                rounded = {phase: round(s, 3) for phase, s in seen.items()}
                print(name, rep, rounded, f"answer {answered:.3f}", flush=True)
    print("\n| server | phase | seconds (median) |\n| --- | --- | ---: |")
    for name, by in phases.items():
        for phase, values in by.items():
            print(f"| {name} | {phase} | {statistics.median(values):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
