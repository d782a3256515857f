"""``-hf`` against a fake Hugging Face hub on loopback (HF_ENDPOINT): pick, download, then work offline."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from huggingface_hub import constants

from lfmserve.errors import InvalidRequest, NotFound, Unavailable
from lfmserve.loading.hub import pick_gguf, pick_mmproj, quant_bits, resolve_hf_model, split_spec
from lfmserve.loading.hub_download import plan_download
from lfmserve.testing import TinyLfm2, TinyProjector, free_port, write_lfm2_gguf, write_mmproj_gguf
from lfmserve.testing.hub import fake_hub
from tests.conftest import Running, ServerThread, wait_healthy
from tests.test_cli import LFMSERVE


def test_split_spec_and_quant_choice() -> None:
    assert split_spec("LiquidAI/LFM2.5-1.2B-Instruct-GGUF") == ("LiquidAI/LFM2.5-1.2B-Instruct-GGUF", "Q4_K_M")
    assert split_spec("org/repo:q8_0") == ("org/repo", "Q8_0")
    with pytest.raises(NotFound):
        split_spec("no-owner")
    files = [
        "README.md",
        "m-Q4_K_M.gguf",
        "m-Q4_K_S.gguf",
        "m-Q8_0.gguf",
        "mmproj-m-Q4_K_M.gguf",
        "big/m-Q6_K-00002-of-00002.gguf",
        "big/m-Q6_K-00001-of-00002.gguf",
    ]
    assert pick_gguf(files, "Q4_K_M") == ["m-Q4_K_M.gguf"]
    assert pick_gguf(files, "q8_0") == ["m-Q8_0.gguf"]
    assert pick_gguf(files, "Q6_K") == ["big/m-Q6_K-00001-of-00002.gguf", "big/m-Q6_K-00002-of-00002.gguf"]
    with pytest.raises(NotFound, match="no F16 GGUF"):
        pick_gguf(files, "F16")


@pytest.mark.slow  # about 9 s: two real server processes
def test_hf_downloads_the_quant_then_serves_from_the_cache_offline(tmp_path: Path, running: list[Running]) -> None:
    assert LFMSERVE is not None
    q4 = write_lfm2_gguf(tmp_path / "q4.gguf", TinyLfm2(seed=11, vision_tokens=True)).read_bytes()
    q8 = write_lfm2_gguf(tmp_path / "q8.gguf", TinyLfm2(seed=12, vision_tokens=True)).read_bytes()
    projector = write_mmproj_gguf(tmp_path / "mmproj.gguf", TinyProjector(kind="vision")).read_bytes()
    repo = "LiquidAI/LFM2.5-VL-Tiny-GGUF"
    files = {
        "README.md": b"# tiny",
        "LFM2.5-VL-Tiny-Q4_K_M.gguf": q4,
        "LFM2.5-VL-Tiny-Q8_0.gguf": q8,
        # llama-server's choice: the nearest quantisation to the model's (Q8_0 to Q4_K_M, not F16), in the
        # model's folder or above it (not in a subfolder)
        "mmproj-LFM2.5-VL-Tiny-Q8_0.gguf": projector,
        "mmproj-LFM2.5-VL-Tiny-F16.gguf": b"junk",
        "extra/mmproj-LFM2.5-VL-Tiny-Q4_K_M.gguf": b"junk",
    }
    hub = ServerThread(fake_hub(repo, files)).start()
    # TQDM_POSITION=-1 shows huggingface_hub's progress bar on a pipe as it does on a terminal.
    env = {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TQDM_POSITION": "-1",
    }
    try:
        online = Running([LFMSERVE, "-hf", repo, "-c", "512", "-np", "1"], env)
        running.append(online)
        wait_healthy(online.url, online.process)
        props = online_props = httpx.get(online.url + "/props").json()
        assert props["model_path"].endswith("LFM2.5-VL-Tiny-Q4_K_M.gguf")
        assert Path(props["model_path"]).read_bytes() == q4
        assert props["modalities"] == {"vision": True, "audio": False, "video": True}
        log = online.stop()
        assert "LFM2.5-VL-Tiny-Q4_K_M.gguf" in log and "100%" in log  # the download's progress bar
        assert "loaded projector" in log and "mmproj-LFM2.5-VL-Tiny-Q8_0.gguf: vision (lfm2)" in log
        text_only = Running([LFMSERVE, "-hf", repo, "-c", "512", "-np", "1", "--no-mmproj"], env)
        running.append(text_only)
        wait_healthy(text_only.url, text_only.process)
        assert httpx.get(text_only.url + "/props").json()["modalities"]["vision"] is False
        text_only.stop()
    finally:
        hub.stop()
    offline = Running([LFMSERVE, "-hf", f"{repo}:Q4_K_M", "-c", "512", "-np", "1"], env)
    running.append(offline)
    wait_healthy(offline.url, offline.process)
    offline_props = httpx.get(offline.url + "/props").json()
    assert offline_props["model_path"] == online_props["model_path"]
    assert offline_props["modalities"]["vision"] is True  # the projector from the cache too
    assert "cannot be reached; using the cached" in offline.stop()
    # --offline (llama-server's flag): the cache at once, without trying the hub.
    forced = Running([LFMSERVE, "-hf", repo, "-c", "512", "-np", "1", "--offline"], env)
    running.append(forced)
    wait_healthy(forced.url, forced.process)
    assert httpx.get(forced.url + "/props").json()["model_path"] == online_props["model_path"]
    assert "cannot be reached" not in forced.stop()


def test_offline_without_the_files_cached_names_the_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(NotFound, match=r"^LiquidAI/Absent-GGUF is not in the local cache \(--offline\)$"):
        resolve_hf_model("LiquidAI/Absent-GGUF", offline=True)


def test_the_projector_is_the_nearest_quantisation_in_the_models_folder_or_above() -> None:
    """llama-server's find_best_mmproj: deepest shared folder first, then the nearest quantisation bits."""
    assert [quant_bits(f) for f in ("m-Q4_K_M.gguf", "mmproj-F16.gguf", "m-Q6_K-00001-of-00002.gguf", "m.gguf")] == [
        4,
        16,
        6,
        0,
    ]
    files = ["m-Q4_K_M.gguf", "mmproj-F16.gguf", "mmproj-Q8_0.gguf", "sub/mmproj-Q4_0.gguf", "mmproj-Q8_0.txt"]
    assert pick_mmproj(files, "m-Q4_K_M.gguf") == "mmproj-Q8_0.gguf"
    assert pick_mmproj(files, "sub/m-Q4_K_M.gguf") == "sub/mmproj-Q4_0.gguf"  # its own folder first
    assert pick_mmproj(["sub/m-F16.gguf", "mmproj-F16.gguf", "mmproj-BF16.gguf"], "sub/m-F16.gguf") == (
        "mmproj-F16.gguf"  # a tie: the first listed
    )
    assert pick_mmproj(["m-Q4_K_M.gguf"], "m-Q4_K_M.gguf") is None


def test_hfd_downloads_the_draft_model(tmp_path: Path, tiny_gguf: Path, running: list[Running]) -> None:
    """``-hfd REPO`` picks and downloads the draft model as ``-hf`` does the model."""
    assert LFMSERVE is not None
    draft = write_lfm2_gguf(tmp_path / "draft.gguf", TinyLfm2(seed=13)).read_bytes()
    repo = "LiquidAI/LFM2-Draft-GGUF"
    hub = ServerThread(fake_hub(repo, {"LFM2-Draft-Q4_K_M.gguf": draft, "LFM2-Draft-Q8_0.gguf": b"junk"})).start()
    env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    try:
        # --no-spec-exact: the tiny model's F32 kernels verify no draft exactly, and the draft model would not load.
        flags = ["--spec-type", "draft-simple", "--no-spec-exact", "-hfd", repo, "-c", "512", "-np", "1"]
        server = Running([LFMSERVE, "-m", str(tiny_gguf), *flags], env)
        running.append(server)
        wait_healthy(server.url, server.process)
        params = httpx.get(server.url + "/props").json()["default_generation_settings"]["params"]
        assert params["speculative.types"] == "draft-simple"
        log = server.stop()
    finally:
        hub.stop()
    path = next(line for line in log.splitlines() if "draft model " in line).split("draft model ")[1].split(" (")[0]
    assert path.endswith("LFM2-Draft-Q4_K_M.gguf") and Path(path).read_bytes() == draft


def test_a_download_planned_while_the_hub_is_unreachable_is_a_503_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused at the hub's door, not after huggingface_hub's half a minute of retries; a malformed name is still the
    client's 400 first."""
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    with pytest.raises(Unavailable) as unreachable:
        plan_download("LiquidAI/Tiny-GGUF:Q8_0", None)
    assert unreachable.value.message == f"the hub at {constants.ENDPOINT} cannot be reached to list LiquidAI/Tiny-GGUF"
    with pytest.raises(InvalidRequest) as malformed:
        plan_download("a b/c", None)
    assert malformed.value.message.startswith("invalid Hugging Face repo 'a b/c': Repo id must use alphanumeric chars")
