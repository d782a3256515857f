"""How long the test-model generator takes to write its models (the test suite writes several per run).

Example::

    python bench/model_writer.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lfmserve.testing import TinyLfm2, write_lfm2_gguf

SPECS = {
    "tiny LFM2": TinyLfm2(seed=1),
    "tiny LFM2-MoE": TinyLfm2(seed=2, n_expert=4),
    "tiny llama": TinyLfm2(seed=2, arch="llama", name="Tiny-Llama-Test"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in SPECS.items():
            seconds = []
            for i in range(args.repeats):
                t0 = time.perf_counter()
                path = write_lfm2_gguf(Path(tmp) / f"{i}.gguf", spec)
                seconds.append(time.perf_counter() - t0)
            row = {"model": name, "median_s": statistics.median(seconds), "bytes": path.stat().st_size}
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
