"""The context a router lists for a model before it loads is the one its child reports once loaded: Frigate sizes
its prompts from the list (``meta.n_ctx``, else ``--ctx-size`` in ``status.args``), and llama-server's router,
which lists no ``meta`` until a child runs, sends it the whole ``-c`` where a request may use one slot's share."""

from __future__ import annotations

from pathlib import Path

import httpx

from lfmserve.loading.fit import host_memory
from lfmserve.testing import TinyLfm2, write_lfm2_gguf
from tests.conftest import Running
from tests.router.conftest import entries, start_router
from tests.router.test_clients import FrigateModelInfo


def test_frigate_reads_before_a_load_the_context_that_props_reports_after_it(
    running: list[Running], router_models: Path, tmp_path: Path
) -> None:
    """Frigate's vision, embedding and audio models under ``ctx-size = 4096``, ``parallel = 2``: 2048 a request,
    not 4096. A fourth model, trained on 1000 tokens and started with ``-c 0``, gets its training context."""
    models = router_models / "models"
    short = write_lfm2_gguf(tmp_path / "short.gguf", TinyLfm2(seed=1, context_length=1000))
    preset = tmp_path / "preset.ini"
    preset.write_text(
        "version = 1\n\n"
        "[*]\nctx-size = 4096\nparallel = 2\n\n"
        f"[embed]\nmodel = {models / 'text.gguf'}\nembeddings = true\npooling = mean\nalias = embedder\n\n"
        f"[short]\nmodel = {short}\nctx-size = 0\nparallel = 1\n"
    )
    router = start_router(running, router_models, preset=preset, child_flags=["--threads", "1", "--no-ui"])
    listed = entries(router)
    args = listed["vision"]["status"]["args"]
    assert (args[args.index("--ctx-size") + 1], args[args.index("--parallel") + 1]) == ("4096", "2")
    assert {name: entry["meta"] for name, entry in listed.items()} == {
        "audio": {"n_ctx": 2048, "n_ctx_train": 4096},
        "embed": {"n_ctx": 2048, "n_ctx_train": 4096},
        "short": {"n_ctx": 1000, "n_ctx_train": 1000},
        "text": {"n_ctx": 2048, "n_ctx_train": 4096},
        "vision": {"n_ctx": 2048, "n_ctx_train": 4096},
    }
    expected = {"vision": 2048, "embedder": 2048, "audio": 2048, "short": 1000}
    for name, n_ctx in expected.items():
        model = "embed" if name == "embedder" else name
        assert entries(router)[model]["status"]["value"] == "unloaded"
        read = FrigateModelInfo(router.url, name).info()["context_size"]  # reads the list, then loads by /props
        props = httpx.get(router.url + "/props", params={"model": name}, timeout=60).json()
        loaded = entries(router)[model]
        assert loaded["status"]["value"] == "loaded"
        assert (read, props["default_generation_settings"]["n_ctx"], loaded["meta"]["n_ctx"]) == (n_ctx,) * 3
    cards = httpx.get(router.url + "/api/ps", timeout=10).json()["models"]
    assert {card["name"]: card["context_length"] for card in cards} == {
        "audio:latest": 2048,
        "embed:latest": 2048,
        "short:latest": 1000,
        "vision:latest": 2048,
    }


def test_a_fitted_child_reports_the_context_it_got_in_every_list(
    running: list[Running], router_models: Path, tmp_path: Path
) -> None:
    """``--fit`` with a margin of all the memory there is: a model trained on 32768 tokens left to ``-c`` gets the
    smallest context ``--fit-ctx`` allows, and once it runs, /v1/models, /props and Ollama's cards say so."""
    long = write_lfm2_gguf(tmp_path / "long.gguf", TinyLfm2(seed=3, context_length=32768))
    preset = tmp_path / "preset.ini"
    preset.write_text(f"version = 1\n\n[long]\nmodel = {long}\nparallel = 2\n")
    everything = str(host_memory() // 2**20)
    flags = ["--threads", "1", "--no-ui", "--fit-target", everything, "--fit-ctx", "1024"]
    router = start_router(running, router_models, preset=preset, child_flags=flags)
    assert entries(router)["long"]["meta"] == {"n_ctx": 16384, "n_ctx_train": 32768}  # before the fit: -c 0's
    props = httpx.get(router.url + "/props", params={"model": "long"}, timeout=60).json()
    assert props["default_generation_settings"]["n_ctx"] == 1024  # 2048 over 2 slots
    assert entries(router)["long"]["meta"]["n_ctx"] == 1024
    shown = httpx.post(router.url + "/api/show", json={"model": "long"}, timeout=10).json()
    assert shown["model_info"]["lfm2.context_length"] == 1024
    cards = httpx.get(router.url + "/api/ps", timeout=10).json()["models"]
    assert {card["name"]: card["context_length"] for card in cards} == {"long:latest": 1024}
