"""LM Studio's models folder as a source of the router: a folder laid out as LM Studio lays it
(``<publisher>/<repo>/<file>.gguf``, a projector beside, a split GGUF, tiny models), found in its default folder
(``~/.lmstudio/models``, under a test's ``HOME``) or read through ``--models-dir``, named ``<publisher>/<repo>``
(``:QUANT`` when a repo holds several), its projector attached and its shards together, a name another source has
kept by that source, and ``--no-models-lmstudio`` listing none."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.router import lmstudio, ollama_store
from lfmserve.router.catalog import build_catalog
from lfmserve.router.lmstudio import studio_folder
from lfmserve.settings import Settings
from lfmserve.testing import TinyLfm2, TinyProjector, write_lfm2_gguf, write_mmproj_gguf
from lfmserve.testing.media import image_bytes
from lfmserve.testing.ollama import MODEL, OllamaStore
from tests.conftest import LFMSERVE, Running, wait_healthy
from tests.router.conftest import CHILD_FLAGS, entries

TEXT = "LiquidAI/LFM2-350M-GGUF"
VL = "LiquidAI/LFM2-VL-450M-GGUF"
SPLIT = "someone/split-GGUF"


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``home/.lmstudio/models`` (LM Studio's: a text model, a vision model in two quants with its projector, a
    model split in two, and what LM Studio passes over: an MLX model, a split GGUF without its first part, a loose
    file, a hidden folder) and ``other/``, a ``--models-dir`` whose publisher folder has the text model's name."""
    root = tmp_path_factory.mktemp("lmstudio")
    models = root / "home" / ".lmstudio" / "models"
    text = write_lfm2_gguf(root / "text.gguf", TinyLfm2(seed=1)).read_bytes()
    vision = write_lfm2_gguf(root / "vl.gguf", TinyLfm2(seed=1, vision_tokens=True, name="Tiny-vision")).read_bytes()
    files = {
        f"{TEXT}/LFM2-350M-Q4_K_M.gguf": text,
        f"{VL}/LFM2-VL-450M-Q4_0.gguf": vision,
        f"{VL}/LFM2-VL-450M-Q8_0.gguf": vision,
        "someone/mlx-4bit/model.safetensors": b"{}",
        "someone/mlx-4bit/config.json": b"{}",
        "someone/broken-GGUF/broken-Q4_K_M-00002-of-00002.gguf": text,
        "loose.gguf": text,
        ".hidden/repo/model.gguf": text,
    }
    for name, data in files.items():
        (models / name).parent.mkdir(parents=True, exist_ok=True)
        (models / name).write_bytes(data)
    write_mmproj_gguf(models / VL / "mmproj-LFM2-VL-450M-F16.gguf", TinyProjector(kind="vision"))
    (models / SPLIT).mkdir(parents=True)
    write_lfm2_gguf(models / SPLIT / "split-Q4_K_M.gguf", TinyLfm2(seed=2), n_split_tensors=16)
    (root / "other" / TEXT).mkdir(parents=True)
    (root / "other" / TEXT / "LFM2-350M-Q8_0.gguf").write_bytes(text)
    (root / "hf-cache").mkdir()
    return root


def _router(layout: Path, *flags: str) -> Running:
    """``lfmserve FLAGS`` with the layout's ``home`` as ``HOME``, an empty Hugging Face cache and no Ollama store."""
    assert LFMSERVE is not None
    env = {
        "HOME": str(layout / "home"),
        "HF_HUB_CACHE": str(layout / "hf-cache"),
        "LFMSERVE_MODELS_OLLAMA_ENABLED": "0",
    }
    server = Running([LFMSERVE, *flags, *CHILD_FLAGS], env=env)
    wait_healthy(server.url, server.process)
    return server


@pytest.fixture(scope="module")
def router(layout: Path) -> Iterator[Running]:
    """The default folder found under ``HOME``, beside ``--models-dir other``."""
    server = _router(layout, "--models-dir", str(layout / "other"))
    try:
        yield server
    finally:
        server.stop()


def _arg(entry: dict[str, Any], flag: str) -> str | None:
    args: list[str] = entry["status"]["args"]
    return args[args.index(flag) + 1] if flag in args else None


def _chat(router: Running, model: str, content: Any = "hello") -> dict[str, Any]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 2,
        "temperature": 0,
        "ignore_eos": True,
    }
    response = httpx.post(router.url + "/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert (answer["model"], answer["usage"]["completion_tokens"]) == (model, 2)
    return answer


# -- the router over LM Studio's folder -------------------------------------------------------------------------


@pytest.mark.slow  # a router of its own
def test_the_default_folder_is_listed_beside_models_dir_which_keeps_its_name(router: Running, layout: Path) -> None:
    models = layout / "home" / ".lmstudio" / "models"
    listed = entries(router)
    assert {name: entry["source"] for name, entry in listed.items()} == {
        TEXT: "models_dir",  # --models-dir has the name: LM Studio's is left out
        f"{VL}:Q4_0": "lmstudio",
        f"{VL}:Q8_0": "lmstudio",
        SPLIT: "lmstudio",
    }
    assert _arg(listed[TEXT], "--model") == str(layout / "other" / TEXT / "LFM2-350M-Q8_0.gguf")
    log = router.log()
    assert f"LM Studio's model {TEXT} is left out: the router already has a model named {TEXT}" in log
    broken = models / "someone" / "broken-GGUF" / "broken-Q4_K_M-00002-of-00002.gguf"
    assert f"the split GGUF {broken} is left out: it does not have each of its 2 parts" in log
    for quant in ("Q4_0", "Q8_0"):
        entry = listed[f"{VL}:{quant}"]
        assert _arg(entry, "--model") == str(models / VL / f"LFM2-VL-450M-{quant}.gguf")
        assert _arg(entry, "--mmproj") == str(models / VL / "mmproj-LFM2-VL-450M-F16.gguf")  # beside: both quants'
        assert entry["architecture"]["input_modalities"] == ["text", "image"]


@pytest.mark.slow  # a router of its own
def test_a_split_model_is_one_model_served_from_its_first_part(router: Running, layout: Path) -> None:
    folder = layout / "home" / ".lmstudio" / "models" / SPLIT
    parts = [f"split-Q4_K_M-0000{n}-of-00003.gguf" for n in (1, 2, 3)]  # 40 tensors, 16 a part
    assert sorted(p.name for p in folder.iterdir()) == parts
    assert _arg(entries(router)[SPLIT], "--model") == str(folder / parts[0])
    _chat(router, SPLIT)
    props = httpx.get(router.url + "/props", params={"model": SPLIT}, timeout=10).json()
    assert props["model_path"] == str(folder / parts[0])


@pytest.mark.slow  # a router of its own
def test_the_projector_beside_answers_an_image(router: Running) -> None:
    image = base64.b64encode(image_bytes(64, 64, seed=1, format="PNG")).decode()
    plain = _chat(router, f"{VL}:Q4_0", [{"type": "text", "text": "What is this?"}])
    part = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}}
    seen = _chat(router, f"{VL}:Q4_0", [{"type": "text", "text": "What is this?"}, part])
    assert seen["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"]  # the image's tokens, from the projector


@pytest.mark.slow  # a router of its own
def test_models_dir_over_the_folder_reads_the_layout_and_the_folder_once(layout: Path) -> None:
    models = layout / "home" / ".lmstudio" / "models"
    server = _router(layout, "--models-dir", str(models))
    try:
        listed = entries(server)
        assert {name: entry["source"] for name, entry in listed.items()} == {
            "loose": "models_dir",  # --models-dir lists the files beside the folders, as llama-server does
            TEXT: "models_dir",
            f"{VL}:Q4_0": "models_dir",
            f"{VL}:Q8_0": "models_dir",
            SPLIT: "models_dir",
        }
        log = server.log()  # the default folder is --models-dir's: read once, as that, no model of it left out
        assert (log.count("is left out"), log.count("the split GGUF")) == (1, 1)
        assert _arg(listed[f"{VL}:Q8_0"], "--mmproj") == str(models / VL / "mmproj-LFM2-VL-450M-F16.gguf")
        _chat(server, TEXT)
    finally:
        server.stop()


@pytest.mark.slow  # a router of its own
def test_no_models_lmstudio_lists_none(layout: Path) -> None:
    server = _router(layout, "--no-models-lmstudio")
    try:
        assert entries(server) == {}
    finally:
        server.stop()


# -- the catalog, without a process ----------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty ``HOME`` and Hugging Face cache, and no Ollama store but one under that home: exact catalogs."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(ollama_store, "DEFAULT_FOLDERS", ("~/.ollama/models",))
    return tmp_path / "home"


def _settings(*argv: str) -> Settings:
    return Settings.from_argv(list(argv), environ={})


def _gguf(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF")  # the catalog reads names, not weights
    return path


def test_a_repos_quants_are_named_as_the_caches_and_a_second_file_of_one_is_left_out(
    tmp_path: Path, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = tmp_path / "studio" / "org" / "many-GGUF"
    names = (
        "many.gguf",
        "many-q4_k_m.gguf",
        "many-Q4_K_M-v2.gguf",
        "many.Q6_K.gguf",
        "Many-Q4_K_M.gguf",
        "many-BF16.gguf",
    )
    for name in names:
        _gguf(repo / name)
    _gguf(repo / "mmproj-many-F16.gguf")
    _gguf(repo / "mmproj-many-Q8_0.gguf")
    catalog = build_catalog(_settings("--models-lmstudio", str(tmp_path / "studio")))
    found = {name: (spec.source, spec.settings.source.model, spec.projector) for name, spec in catalog.items()}
    assert found == {
        "org/many-GGUF": ("lmstudio", str(repo / "many.gguf"), str(repo / "mmproj-many-Q8_0.gguf")),
        "org/many-GGUF:BF16": ("lmstudio", str(repo / "many-BF16.gguf"), str(repo / "mmproj-many-F16.gguf")),
        "org/many-GGUF:Q4_K_M": ("lmstudio", str(repo / "Many-Q4_K_M.gguf"), str(repo / "mmproj-many-Q8_0.gguf")),
        "org/many-GGUF:V2": ("lmstudio", str(repo / "many-Q4_K_M-v2.gguf"), str(repo / "mmproj-many-Q8_0.gguf")),
        "org/many-GGUF:Q6_K": ("lmstudio", str(repo / "many.Q6_K.gguf"), str(repo / "mmproj-many-Q8_0.gguf")),
    }  # the projector nearest in bits, as llama-server picks
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"the GGUF {repo / 'many-q4_k_m.gguf'} is left out: org/many-GGUF:Q4_K_M is already {repo / 'Many-Q4_K_M.gguf'}"
    ]


def test_models_dir_keeps_its_files_and_folders_and_adds_publishers(tmp_path: Path, home: Path) -> None:
    models = tmp_path / "models"
    _gguf(models / "plain.gguf")
    _gguf(models / "vl" / "model.gguf")
    _gguf(models / "vl" / "nested" / "other.gguf")  # a model folder is a model, never a publisher
    _gguf(models / "pub" / "repo" / "repo-Q4_0-00001-of-00002.gguf")
    _gguf(models / "pub" / "repo" / "repo-Q4_0-00002-of-00002.gguf")
    _gguf(models / "pub" / "repo" / "mmproj-repo-F16.gguf")
    (models / "pub" / "empty").mkdir()
    (models / "pub" / "README.md").write_text("a loose file of a publisher")
    catalog = build_catalog(_settings("--models-dir", str(models), "--no-models-lmstudio"))
    assert {name: spec.source for name, spec in catalog.items()} == {
        "plain": "models_dir",
        "vl": "models_dir",
        "pub/repo": "models_dir",
    }
    repo = models / "pub" / "repo"
    spec = catalog["pub/repo"]
    assert (spec.settings.source.model, spec.settings.source.mmproj) == (
        str(repo / "repo-Q4_0-00001-of-00002.gguf"),
        str(repo / "mmproj-repo-F16.gguf"),
    )
    assert spec.files == tuple(
        str(repo / n)
        for n in ("repo-Q4_0-00001-of-00002.gguf", "repo-Q4_0-00002-of-00002.gguf", "mmproj-repo-F16.gguf")
    )


def test_a_name_another_source_has_keeps_that_source(
    tmp_path: Path, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    studio = tmp_path / "studio"
    for repo in ("taken", "aliased", "ollama", "free"):
        _gguf(studio / "pub" / repo / f"{repo}-Q4_K_M.gguf")
    models = tmp_path / "models"
    _gguf(models / "pub" / "taken" / "taken-Q8_0.gguf")
    store = OllamaStore(tmp_path / "store")
    store.add("registry.ollama.ai/pub/ollama/latest", [(MODEL, b"GGUF")])
    preset = tmp_path / "preset.ini"
    preset.write_text(f"[mine]\nmodel = {tmp_path / 'mine.gguf'}\nalias = pub/aliased\n\n[pub/free]\nctx-size = 1024\n")
    argv = ["--models-lmstudio", str(studio), "--models-ollama", str(tmp_path / "store")]
    catalog = build_catalog(_settings(*argv, "--models-dir", str(models), "--models-preset", str(preset)))
    assert {name: spec.source for name, spec in catalog.items()} == {
        "mine": "preset",
        "pub/free": "preset",  # its section adds its flags
        "pub/ollama:latest": "ollama",
        "pub/taken": "models_dir",
    }
    assert catalog["pub/taken"].settings.source.model == str(models / "pub" / "taken" / "taken-Q8_0.gguf")
    free = catalog["pub/free"].settings
    assert (free.source.model, free.engine.ctx_size) == (str(studio / "pub" / "free" / "free-Q4_K_M.gguf"), 1024)
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "LM Studio's model pub/ollama is left out: the router already has a model named pub/ollama:latest",
        "LM Studio's model pub/taken is left out: the router already has a model named pub/taken",
        "LM Studio's model pub/aliased is left out: the router already has a model named pub/aliased",
    ]


def test_the_folder_is_found_in_lm_studios_default_folders_and_odd_ones_list_nothing(
    tmp_path: Path, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert studio_folder(_settings().router) is None
    older = home / ".cache" / "lm-studio" / "models"
    older.mkdir(parents=True)
    assert studio_folder(_settings().router) == str(older)
    current = home / ".lmstudio" / "models"
    current.mkdir(parents=True)
    assert studio_folder(_settings().router) == str(current)  # today's folder first
    assert studio_folder(_settings("--models-lmstudio", "/mine").router) == "/mine"
    assert studio_folder(_settings("--no-models-lmstudio", "--models-lmstudio", "/mine").router) is None
    assert lmstudio.DEFAULT_FOLDERS == ("~/.lmstudio/models", "~/.cache/lm-studio/models")
    (current / "pub").symlink_to(tmp_path / "nowhere")  # a dangling link is no folder
    (tmp_path / "file").write_text("not a folder")
    assert build_catalog(_settings()) == {}
    assert build_catalog(_settings("--models-lmstudio", str(tmp_path / "file"))) == {}
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"LM Studio's models folder {tmp_path / 'file'} is not a folder: none of its models are listed"
    ]
