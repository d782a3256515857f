"""``--cache-disk`` under a router: every child gets the same folder, and each model's child keeps to its own
subfolder (another model's files are never read, nor trimmed against another budget than the folder's)."""

from __future__ import annotations

from pathlib import Path

from lfmserve.engine.disk_cache import subfolder
from lfmserve.engine.disk_cache_file import read_header
from tests.conftest import Running
from tests.router.conftest import chat, start_router

#: Long enough for a slot to be worth writing at shutdown (more than 32 tokens).
PROMPT = " ".join(f"Line {i} of a prompt long enough to keep." for i in range(12))


def test_children_of_two_models_write_to_their_own_subfolders(
    running: list[Running], router_models: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "cache"
    router = start_router(running, router_models, "--cache-disk", str(folder))
    for model in ("text", "vision"):
        response = chat(router, model, messages=[{"role": "user", "content": PROMPT}])
        assert response.status_code == 200, response.text
    router.stop()  # each child writes its slot's sequence as it stops
    files = list(folder.glob("*/*"))
    assert len(files) == 2 and files[0].parent != files[1].parent  # one file in each of two subfolders
    for path in files:
        with path.open("rb") as file:
            assert path.parent.name == subfolder(read_header(file).identity)
    assert [path.name for path in folder.iterdir() if path.is_file()] == []
