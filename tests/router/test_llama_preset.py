"""A router preset written as llama-server's docs write one: with its variable names (``LLAMA_ARG_*``), and with
speculation keys its children draft with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from lfmserve.testing import TinyLfm2, write_lfm2_gguf
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


def test_a_preset_models_child_drafts_with_the_speculation_its_section_names(
    running: list[Running], router_models: Path, tmp_path: Path
) -> None:
    """A section's ``spec-type`` (drafting from the request's own tokens) and ``model-draft`` (a draft model) reach
    its child, which drafts: its ``/metrics``, read through the router, count the drafts its answer's timings
    report. The tiny random models reject nearly every draft themselves, so ``spec-synth-rates`` keeps each one
    (llama-server's benchmarking mode): every draft is accepted, whatever the model samples."""
    draft = write_lfm2_gguf(tmp_path / "draft.gguf", TinyLfm2(seed=2))
    text = router_models / "models" / "text.gguf"
    preset = tmp_path / "preset.ini"
    preset.write_text(
        "version = 1\n\n[*]\nctx-size = 1024\n\n"
        f"[copy]\nmodel = {text}\nspec-type = ngram-simple\nspec-ngram-simple-size-n = 1\n"
        "spec-ngram-simple-size-m = 4\nspec-synth-rates = 1,1,1,1\n\n"
        f"[drafted]\nmodel = {text}\nspec-type = draft-simple\nmodel-draft = {draft}\nspec-synth-rates = 1,1,1\n"
    )
    router = start_router(running, router_models, "--metrics", preset=preset)
    body = {"prompt": "one two three four " * 8, "n_predict": 24, "temperature": 0, "ignore_eos": True}
    copied = _drafts(router, {**body, "model": "copy"})  # as many as the model's own tokens repeat earlier ones
    assert copied[0] > 0 and copied[1] == copied[0]
    # The first token comes from the prompt's step, the other 23 four a step (3 drafts and the model's own), the
    # last step's draft cut to the 2 tokens left before the model's own: 5 * 3 + 2.
    assert _drafts(router, {**body, "model": "drafted"}) == (17, 17)
    args = entries(router)["drafted"]["status"]["args"]
    assert args[args.index("--spec-draft-model") + 1] == str(draft)


def _drafts(router: Running, body: dict[str, Any]) -> tuple[int, int]:
    """The drafts made and accepted for ``body`` as its answer's timings count them, checked against its model's
    ``/metrics`` (a fresh child's: the counters hold this request alone)."""
    reply = httpx.post(router.url + "/completion", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    timings = reply.json()["timings"]
    metrics = httpx.get(router.url + "/metrics", params={"model": body["model"]}, timeout=10).text
    counted = {
        line.split()[0]: float(line.split()[1]) for line in metrics.splitlines() if line.startswith("llamacpp:spec")
    }
    assert counted["llamacpp:spec_decode_num_draft_tokens_total"] == timings["draft_n"]
    assert counted["llamacpp:spec_decode_num_accepted_tokens_total"] == timings["draft_n_accepted"]
    return timings["draft_n"], timings["draft_n_accepted"]
