"""``-hf`` against a fake Hugging Face hub on loopback (HF_ENDPOINT): pick, download, then work offline."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lfmserve.errors import NotFound
from lfmserve.models.hub import pick_gguf, split_spec
from lfmserve.testing import TinyLfm2, write_lfm2_gguf
from tests.conftest import Running, ServerThread, wait_healthy
from tests.test_cli import LFMSERVE

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fake_hub(repo: str, files: dict[str, bytes]) -> Starlette:
    """The two hub routes huggingface_hub uses here: the file tree, and resolve (HEAD + GET)."""

    async def tree(request: Request) -> Response:
        if f"{request.path_params['owner']}/{request.path_params['name']}" != repo:
            return JSONResponse({"error": "Repository not found"}, status_code=404)
        return JSONResponse(
            [
                {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                for name, data in files.items()
            ]
        )

    async def resolve(request: Request) -> Response:
        name = request.path_params["filename"]
        if f"{request.path_params['owner']}/{request.path_params['name']}" != repo or name not in files:
            return JSONResponse({"error": "Entry not found"}, status_code=404)
        data = files[name]
        headers = {
            "X-Repo-Commit": COMMIT,
            "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
            "Content-Length": str(len(data)),
        }
        return Response(
            b"" if request.method == "HEAD" else data, headers=headers, media_type="application/octet-stream"
        )

    return Starlette(
        routes=[
            Route("/api/models/{owner}/{name}/tree/{revision}", tree),
            Route("/{owner}/{name}/resolve/{revision}/{filename:path}", resolve, methods=["GET", "HEAD"]),
        ]
    )


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


def test_hf_downloads_the_quant_then_serves_from_the_cache_offline(tmp_path: Path, running: list[Running]) -> None:
    assert LFMSERVE is not None
    q4 = write_lfm2_gguf(tmp_path / "q4.gguf", TinyLfm2(seed=11)).read_bytes()
    q8 = write_lfm2_gguf(tmp_path / "q8.gguf", TinyLfm2(seed=12)).read_bytes()
    repo = "LiquidAI/LFM2.5-Tiny-GGUF"
    files = {
        "README.md": b"# tiny",
        "LFM2.5-Tiny-Q4_K_M.gguf": q4,
        "LFM2.5-Tiny-Q8_0.gguf": q8,
        "mmproj-LFM2.5-Tiny-Q4_K_M.gguf": b"junk",
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
        assert props["model_path"].endswith("LFM2.5-Tiny-Q4_K_M.gguf")
        assert Path(props["model_path"]).read_bytes() == q4
        log = online.stop()
        assert "LFM2.5-Tiny-Q4_K_M.gguf" in log and "100%" in log  # the download's progress bar
    finally:
        hub.stop()
    offline = Running([LFMSERVE, "-hf", f"{repo}:Q4_K_M", "-c", "512", "-np", "1"], env)
    running.append(offline)
    wait_healthy(offline.url, offline.process)
    assert httpx.get(offline.url + "/props").json()["model_path"] == online_props["model_path"]
    assert "cannot be reached; using the cached" in offline.stop()
