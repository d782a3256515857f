"""How the router lists its models and what each child is started with, read from a folder, a preset and the
Hugging Face cache (no process is started here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lfmserve.errors import LfmError
from lfmserve.router.catalog import build_catalog
from lfmserve.router.child import child_argv
from lfmserve.router.preset import canonical_name
from lfmserve.settings import Settings


def _gguf(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF")  # the catalog reads names, not weights
    return path


def _cache_model(cache: Path, repo: str, filename: str) -> Path:
    folder = cache / ("models--" + repo.replace("/", "--"))
    blob = _gguf(folder / "blobs" / filename.replace(".gguf", ""))
    snapshot = folder / "snapshots" / ("1" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / filename).symlink_to(os.path.relpath(blob, snapshot))
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("1" * 40)
    return snapshot / filename


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_flags_come_from_the_global_section_the_models_own_then_the_routers_command_line(
    tmp_path: Path, cache: Path
) -> None:
    model = _gguf(tmp_path / "models" / "m.gguf")
    preset = tmp_path / "preset.ini"
    preset.write_text("[*]\nc = 2048\nthreads = 3\ntemp = 0.5\n\n[m]\nctx-size = 4096\nLLAMA_ARG_N_PREDICT = 7\n")
    argv = ["--models-dir", str(tmp_path / "models"), "--models-preset", str(preset), "--temp", "0.1", "-np", "1"]
    spec = build_catalog(Settings.from_argv(argv))["m"]
    engine, sampling = spec.settings.engine, spec.settings.sampling
    assert (engine.ctx_size, spec.settings.threads.threads, engine.parallel) == (4096, 3, 1)
    assert (sampling.temperature, sampling.n_predict) == (0.1, 7)
    assert (spec.source, spec.settings.source.model) == ("preset", str(model))
    assert child_argv(spec.settings, "m", 5000) == [
        "--host", "127.0.0.1", "--port", "5000", "--model", str(model), "--alias", "m",
        "--ctx-size", "4096", "--parallel", "1", "--threads", "3",
        "--temperature", "0.1", "--n-predict", "7", "--jinja",
    ]  # fmt: skip


def test_llama_cpps_config_files_are_every_models_weakest_flags(tmp_path: Path, cache: Path) -> None:
    _gguf(tmp_path / "models" / "m.gguf")
    _gguf(tmp_path / "models" / "other.gguf")
    config = tmp_path / "config.ini"
    config.write_text("ctx-size = 3072\nthreads = 3\ntemp = 0.5\n")
    preset = tmp_path / "preset.ini"
    preset.write_text("[*]\ntemp = 0.7\n\n[m]\nctx-size = 4096\n")
    argv = ["--models-dir", str(tmp_path / "models"), "--models-preset", str(preset), "-np", "1"]
    settings = Settings.from_argv(argv, config_files=[str(config)])
    assert settings.configured == ("ctx_size", "threads", "temperature")
    catalog = build_catalog(settings)
    picked = {
        name: (spec.settings.engine.ctx_size, spec.settings.threads.threads, spec.settings.sampling.temperature)
        for name, spec in catalog.items()
    }
    assert picked == {"m": (4096, 3, 0.7), "other": (3072, 3, 0.7)}  # a section, then [*], over the files


def test_a_folder_gives_files_and_sub_folders_with_their_projector_shards_and_draft(
    tmp_path: Path, cache: Path
) -> None:
    models = tmp_path / "models"
    _gguf(models / "plain-Q4_K_M.gguf")
    _gguf(models / "mmproj-loose.gguf")  # a companion file is not a model
    vl = models / "vl"
    for name in ("model-00001-of-00002.gguf", "model-00002-of-00002.gguf", "mmproj-F16.gguf", "mtp-draft.gguf"):
        _gguf(vl / name)
    catalog = build_catalog(Settings.from_argv(["--models-dir", str(models)]))
    assert sorted(catalog) == ["plain-Q4_K_M", "vl"]
    source = catalog["vl"].settings.source
    assert (source.model, source.mmproj) == (str(vl / "model-00001-of-00002.gguf"), str(vl / "mmproj-F16.gguf"))
    assert catalog["vl"].settings.speculation.spec_draft_model == str(vl / "mtp-draft.gguf")
    assert catalog["vl"].files == tuple(
        str(vl / n) for n in ("model-00001-of-00002.gguf", "model-00002-of-00002.gguf", "mmproj-F16.gguf")
    )


def test_the_cache_lists_a_model_per_repo_and_quant_started_offline(cache: Path) -> None:
    first = _cache_model(cache, "org/lfm-GGUF", "lfm-Q4_K_M.gguf")
    _cache_model(cache, "org/other-GGUF", "other-q8_0.gguf")
    catalog = build_catalog(Settings())
    assert sorted(catalog) == ["org/lfm-GGUF:Q4_K_M", "org/other-GGUF:Q8_0"]
    spec = catalog["org/lfm-GGUF:Q4_K_M"]
    assert (spec.source, spec.settings.source.hf_repo, spec.settings.source.offline) == (
        "cache",
        "org/lfm-GGUF:Q4_K_M",
        True,
    )
    assert spec.files == (str(first),)


def test_dedup_cache_models_hides_the_cache_entries_a_preset_covers(tmp_path: Path, cache: Path) -> None:
    _cache_model(cache, "org/lfm-GGUF", "lfm-Q4_K_M.gguf")
    _cache_model(cache, "org/draft-GGUF", "draft-Q8_0.gguf")
    _cache_model(cache, "org/kept-GGUF", "kept-Q8_0.gguf")
    preset = tmp_path / "preset.ini"
    preset.write_text("[mine]\nhf-repo = org/lfm-GGUF\nspec-draft-hf = org/draft-GGUF:q8_0\ndedup-cache-models = 1\n")
    catalog = build_catalog(Settings.from_argv(["--models-preset", str(preset)]))
    hidden = sorted(name for name, spec in catalog.items() if spec.hidden)
    assert hidden == ["org/draft-GGUF:Q8_0", "org/lfm-GGUF:Q4_K_M"]
    assert not catalog["mine"].hidden and not catalog["org/kept-GGUF:Q8_0"].hidden


@pytest.mark.parametrize(
    ("preset", "message"),
    [
        ("[m]\nmodel = x.gguf\nbogus = 1\n", "option 'bogus' not recognized in preset 'm'"),
        ("[m]\nmodel = x.gguf\njinja = maybe\n", "preset 'm': jinja = 'maybe': not true or false"),
        (
            "[m]\nmodel = x.gguf\nctx-size = lots\n",
            "model 'm': argument -c/--ctx-size: invalid int value: 'lots' (see --help)",
        ),
        ("[m]\nmodel = x.gguf\nalias = n\n\n[n]\nmodel = y.gguf\n", "alias 'n' for model 'n' conflicts with model 'm'"),
        ("[m]\nmodel = x.gguf\nttl = soon\n", "preset 'm': ttl = 'soon' is not a number"),
    ],
)
def test_a_preset_mistake_stops_the_router_naming_the_section(
    tmp_path: Path, cache: Path, preset: str, message: str
) -> None:
    path = tmp_path / "preset.ini"
    path.write_text(preset)
    with pytest.raises(LfmError) as refused:
        build_catalog(Settings.from_argv(["--models-preset", str(path)]))
    assert refused.value.message == message


def test_section_names_get_llama_servers_quant_spelling() -> None:
    assert [canonical_name(n) for n in ("org/r:q4_k_m", "org/r:model-q8_0", "plain", "*")] == [
        "org/r:Q4_K_M",
        "org/r:Q8_0",
        "plain",
        "*",
    ]
