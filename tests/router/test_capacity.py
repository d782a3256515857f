"""What the memory budget counts of a model before its child runs: the bytes of the files its child loads, a draft
model's among them (no process is started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lfmserve.router.capacity import Capacity, files_size
from lfmserve.router.catalog import ModelSpec, build_catalog
from lfmserve.router.instance import Instance
from lfmserve.settings import Settings


def _file(path: Path, n_bytes: int) -> Path:
    path.write_bytes(b"\0" * n_bytes)  # the budget reads sizes, not weights
    return path


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, ModelSpec]:
    """A preset's models of one 1000-byte model file: with a 300-byte projector and a 70-byte draft model, the
    draft named in each spelling a preset may use."""
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "cache"))
    model, projector = _file(tmp_path / "m.gguf", 1000), _file(tmp_path / "mmproj-m.gguf", 300)
    draft = _file(tmp_path / "d.gguf", 70)
    preset = tmp_path / "preset.ini"
    preset.write_text(
        f"version = 1\n\n[*]\nmodel = {model}\n\n"
        f"[drafted]\nmmproj = {projector}\nspec-type = draft-simple\nmodel-draft = {draft}\n\n"
        f"[short]\nspec-type = ngram-simple,draft-simple\nmd = {draft}\n\n"
        f"[unused]\nspec-type = ngram-simple\nspec-draft-model = {draft}\n\n"
        "[plain]\n"
    )
    argv = ["--models-preset", str(preset), "--no-models-ollama", "--no-models-lmstudio"]
    return build_catalog(Settings.from_argv(argv))


def test_a_draft_model_counts_in_the_files_its_child_loads(catalog: dict[str, ModelSpec], tmp_path: Path) -> None:
    """A draft counts where its child loads it (``draft-simple``), and stays out of the model's own files (its size
    in Ollama's lists); a child drafting from its own tokens never loads a ``-md`` file, which then counts nothing."""
    assert {name: files_size(spec) for name, spec in catalog.items()} == {
        "drafted": 1000 + 300 + 70,
        "short": 1000 + 70,
        "unused": 1000,
        "plain": 1000,
    }
    drafted = catalog["drafted"]
    assert drafted.files == (str(tmp_path / "m.gguf"), str(tmp_path / "mmproj-m.gguf"))
    assert drafted.memory_files == (*drafted.files, str(tmp_path / "d.gguf"))


def test_the_budget_counts_the_draft_model(catalog: dict[str, ModelSpec]) -> None:
    """1050 bytes hold the model alone but not the model and its draft."""
    capacity = Capacity(Settings.of(models_memory_max=1050).router)
    assert capacity.too_big(Instance(catalog["plain"])) is None
    assert capacity.too_big(Instance(catalog["short"])) == (
        "model 'short' needs 0.0 MiB for its files alone, more than --models-memory-max (0.0 MiB)"
    )
    running = Instance(catalog["plain"], status="loaded")
    assert not Capacity(Settings.of(models_memory_max=2070).router).full([running], Instance(catalog["short"]))
    assert Capacity(Settings.of(models_memory_max=2069).router).full([running], Instance(catalog["short"]))
