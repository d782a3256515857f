"""From the settings groups to the engine's records: every batching and cache flag, and the speculative sizes
checked as llama-server checks them."""

from __future__ import annotations

import pytest

from lfmserve.engine.records import EngineConfig
from lfmserve.engine.speculation import NgramModSizes, NgramSizes, SpeculationConfig
from lfmserve.errors import EngineError
from lfmserve.loading.engine_config import engine_config, speculation_config
from lfmserve.settings import Settings


def test_the_engine_gets_every_batching_and_cache_flag() -> None:
    settings = Settings.of(
        ctx_size=8192,
        parallel=3,
        batch_size=1024,
        ubatch_size=256,
        threads=3,
        threads_batch=2,
        slot_prompt_similarity=0.5,
        max_queue=7,
        ctx_checkpoints=4,
        cache_ram=16,
        cache_reuse=32,
    )
    assert engine_config(settings) == EngineConfig(
        n_ctx=8192,
        n_slots=3,
        n_batch=1024,
        n_ubatch=256,
        n_threads=3,
        n_threads_batch=2,
        slot_similarity=0.5,
        max_queue=7,
        max_checkpoints=4,
        cache_ram_bytes=16 * 2**20,
        cache_reuse=32,
    )


def test_spec_flags_become_the_speculation_config_and_bad_ones_are_refused() -> None:
    settings = Settings.from_argv(
        ["-m", "m.gguf", "--spec-type", "ngram-simple,ngram-mod", "--spec-ngram-simple-size-n", "4"]
        + ["--spec-draft-n-min", "2", "--spec-ngram-mod-n-match", "16", "--spec-ngram-mod-n-max", "32"]
        + ["--spec-ngram-map-k4v-min-hits", "3", "--draft-p-min", "0.75", "--spec-ngram-map-k-size-m", "20"]
    )
    assert speculation_config(settings.speculation) == SpeculationConfig(
        types=("ngram-simple", "ngram-mod"),
        n_max=3,
        n_min=2,
        p_min=0.75,
        ngram_simple=NgramSizes(size_n=4),
        ngram_map_k=NgramSizes(size_m=20),
        ngram_map_k4v=NgramSizes(min_hits=3),
        ngram_mod=NgramModSizes(n_match=16, n_max=32),
    )
    assert speculation_config(settings.speculation).max_draft == 48  # ngram-simple's 48 > ngram-mod's 32
    assert speculation_config(Settings.of(model="m.gguf", spec_type="ngram-cache").speculation).max_draft == 8
    draft = Settings.from_argv(
        ["-m", "m.gguf", "--spec-type", "draft-simple", "-md", "d.gguf", "--spec-draft-n-max", "5"]
    )
    assert speculation_config(draft.speculation) == SpeculationConfig(
        types=("draft-simple",), n_max=5, draft_model="d.gguf"
    )
    assert speculation_config(draft.speculation).max_draft == 5
    own = Settings.from_argv(
        ["-m", "m.gguf", "--spec-type", "draft-simple", "-md", "d.gguf", *"-td 1 -tbd 2 -ctkd q8_0 -ctvd q4_0".split()]
    )
    assert speculation_config(own.speculation) == SpeculationConfig(
        types=("draft-simple",), draft_model="d.gguf", n_threads=1, n_threads_batch=2, type_k="q8_0", type_v="q4_0"
    )
    assert not speculation_config(Settings.of(model="m.gguf", spec_type="none").speculation).enabled
    with pytest.raises(EngineError, match=r"^--spec-type draft-eagle3 is not supported \(supported: ngram-simple, "):
        speculation_config(Settings.of(model="m.gguf", spec_type="ngram-simple,draft-eagle3").speculation)
    with pytest.raises(EngineError, match=r"^--spec-type draft-simple needs a draft model \(-md FILE or -hfd REPO\)$"):
        speculation_config(Settings.of(model="m.gguf", spec_type="draft-simple").speculation)
    with pytest.raises(EngineError, match="^ngram size N must be between 1 and 1024 inclusive$"):
        speculation_config(Settings.of(model="m.gguf", spec_ngram_mod_n_match=0).speculation)
    with pytest.raises(EngineError, match="^ngram size M must be between 1 and 1024 inclusive$"):
        speculation_config(Settings.of(model="m.gguf", spec_ngram_map_k4v_size_m=1025).speculation)
    with pytest.raises(EngineError, match="^ngram min hits must be at least 1$"):
        speculation_config(Settings.of(model="m.gguf", spec_ngram_map_k_min_hits=0).speculation)
    with pytest.raises(EngineError, match="^--spec-draft-p-min must be between 0 and 1$"):
        speculation_config(Settings.of(model="m.gguf", spec_draft_p_min=1.5).speculation)
