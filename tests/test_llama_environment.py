"""A llama-server deployment moved as it is: its ``LLAMA_ARG_*`` variables (a Docker compose file's) and its GPU
flags on this CPU build, over a real process and HTTP (a router preset of variable names: tests/router)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx

from lfmserve.testing import free_port, llama_server_weight_flags
from tests.conftest import wait_healthy
from tests.test_cli import LFMSERVE


def test_llama_servers_variables_and_device_flags_serve_as_llama_server_would(tiny_gguf: Path, tmp_path: Path) -> None:
    """``LLAMA_ARG_CTX_SIZE=3072 LLAMA_ARG_N_PARALLEL=3``: 3 slots of 1024 tokens (not lfmserve's 4 of 2048), on
    the port and host the variables name; the GPU flags start it with one warning line naming them."""
    assert LFMSERVE is not None
    port = free_port()
    env = {
        **os.environ,
        "LLAMA_ARG_CTX_SIZE": "3072",
        "LLAMA_ARG_N_PARALLEL": "3",
        "LLAMA_ARG_PORT": str(port),
        "LLAMA_ARG_HOST": "127.0.0.1",
        "LLAMA_ARG_THREADS": "1",
    }
    # Weights placed explicitly where llama.cpp has AMX, which would otherwise be a warning of its own.
    device = "-sm none -mg 0 -ts 1,1 -ot exps=CPU --cpu-moe".split() + list(llama_server_weight_flags())
    log = tmp_path / "lfmserve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [LFMSERVE, "-m", str(tiny_gguf), *device], stdout=output, stderr=subprocess.STDOUT, env=env
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        props = httpx.get(url + "/props", timeout=10).json()
        assert (props["total_slots"], props["default_generation_settings"]["n_ctx"]) == (3, 1024)
    finally:
        process.terminate()
        process.wait(timeout=60)
    warnings = [line for line in log.read_text().splitlines() if " WARNING " in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].endswith(
        "lfmserve.loading.placement: llama-server options ignored: -sm, -ts, -ot, -cmoe (device placement: this "
        "llama.cpp build runs on the CPU)"  # -mg 0 is the default: it places nothing differently
    )
