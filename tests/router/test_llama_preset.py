"""A router preset written with llama-server's variable names (``LLAMA_ARG_*``), as its own docs write them."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import Running
from tests.router.conftest import entries, start_router


def test_a_router_preset_written_with_llama_servers_variable_names(
    running: list[Running], router_models: Path, tmp_path: Path
) -> None:
    preset = tmp_path / "preset.ini"
    preset.write_text(
        "version = 1\n\n[text]\nLLAMA_ARG_CTX_SIZE = 3072\nLLAMA_ARG_N_PARALLEL = 3\nLLAMA_ARG_NO_JINJA = 1\n"
    )
    router = start_router(running, router_models, preset=preset, child_flags=["--threads", "1", "--no-ui"])
    text = entries(router)["text"]
    args = text["status"]["args"]
    assert (args[args.index("--ctx-size") + 1], args[args.index("--parallel") + 1]) == ("3072", "3")
    assert "--no-jinja" in args and "--jinja" not in args
    assert text["meta"]["n_ctx"] == 1024
    props = httpx.get(router.url + "/props", params={"model": "text"}, timeout=120).json()
    assert (props["total_slots"], props["default_generation_settings"]["n_ctx"]) == (3, 1024)
