"""From the settings groups to the engine's records: every batching and cache flag, and the speculative sizes
checked as llama-server checks them."""

from __future__ import annotations

import pytest

from lfmserve.engine.records import ContextSizes, EngineConfig, context_sizes
from lfmserve.engine.speculation import NgramModSizes, NgramSizes, SpeculationConfig
from lfmserve.errors import EngineError
from lfmserve.loading.engine_config import engine_config, requested_context, slot_context, speculation_config
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
        adaptive_threads=False,
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
        adaptive_threads=False,
    )
    assert engine_config(Settings.of()).adaptive_threads  # on unless --no-adaptive-threads


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


def _speculation(*argv: str, environ: dict[str, str] | None = None) -> SpeculationConfig:
    return speculation_config(Settings.from_argv(["-m", "m.gguf", *argv], environ=environ or {}).speculation)


def test_drafts_are_verified_as_llama_server_does_unless_spec_exact() -> None:
    assert _speculation("--spec-type", "ngram-simple") == SpeculationConfig(types=("ngram-simple",), exact=False)
    assert _speculation("--spec-type", "ngram-simple", "--spec-exact").exact is True
    assert _speculation("--spec-exact", "--no-spec-exact").exact is False
    assert _speculation(environ={"LFMSERVE_SPEC_EXACT": "1"}).exact is True


def test_spec_default_adds_ngram_mod_with_llama_servers_sizes() -> None:
    default_sizes = NgramModSizes(n_match=24, n_min=48, n_max=64)
    assert _speculation("--spec-default") == SpeculationConfig(types=("ngram-mod",), ngram_mod=default_sizes)
    assert _speculation("--spec-type", "ngram-simple", "--spec-default").types == ("ngram-simple", "ngram-mod")
    assert _speculation("--spec-type", "ngram-mod", "--spec-default").types == ("ngram-mod",)
    assert _speculation(environ={"LFMSERVE_SPEC_DEFAULT": "1"}).types == ("ngram-mod",)
    # As in llama-server, options apply in command-line order: a size after --spec-default wins, one before loses.
    early = ("--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "2", "--spec-ngram-mod-n-max", "16")
    assert _speculation(*early, "--spec-default").ngram_mod == default_sizes
    assert _speculation("--spec-default", *early).ngram_mod == NgramModSizes(n_match=8, n_min=2, n_max=16)
    assert _speculation("--spec-default", "--spec-ngram-mod-n-max", "32").ngram_mod == NgramModSizes(n_max=32)
    # A variable sets only the switch: the sizes stay what the command line and the other variables say.
    sized = {"LFMSERVE_SPEC_DEFAULT": "1", "LFMSERVE_SPEC_NGRAM_MOD_N_MAX": "32"}
    assert _speculation(environ=sized).ngram_mod == NgramModSizes(n_max=32)
    assert _speculation("--spec-default", environ=sized).ngram_mod == default_sizes
    assert not _speculation().enabled


def _sizes(*argv: str, n_ctx_train: int = 32768) -> tuple[int, int, int]:
    settings = Settings.from_argv(["-m", "m.gguf", *argv], environ={})
    sizes = engine_config(settings).context_sizes(n_ctx_train)
    assert slot_context(settings, n_ctx_train) == sizes.n_ctx_slot  # the router lists what the child gets
    return requested_context(settings), sizes.n_ctx, sizes.n_ctx_slot


def test_kv_unified_per_slot_caps_a_slot_and_sizes_a_pool_left_to_the_model() -> None:
    # Without -c: -np times the cap (padded to 256 by llama.cpp), each slot held to the cap.
    assert _sizes("-np", "3", "-kvu", "--kv-unified-per-slot", "1000") == (3000, 3072, 1000)
    assert _sizes("-np", "2", "--kv-unified-per-slot", "1000") == (2000, 2048, 1000)  # shares of 1024, capped
    # With -c the pool is the user's: a cap below a slot's share binds, one above it cannot.
    assert _sizes("-c", "8192", "-np", "2", "-kvu", "--kv-unified-per-slot", "3000") == (8192, 8192, 3000)
    assert _sizes("-c", "4096", "-np", "2", "--kv-unified-per-slot", "3000") == (4096, 4096, 2048)
    # -c 0 asks for the model's context (llama-server does not size the pool then); the training context caps too.
    assert _sizes("-c", "0", "-np", "2", "-kvu", "--kv-unified-per-slot", "1000") == (0, 32768, 1000)
    assert _sizes("-np", "1", "--kv-unified-per-slot", "9000", n_ctx_train=4096) == (9000, 9216, 4096)
    assert _sizes("-np", "2") == (0, 32768, 16384)  # no cap: as before


def test_a_header_not_read_caps_nothing() -> None:
    assert context_sizes(4096, 2, n_ctx_train=0) == ContextSizes(n_ctx=4096, n_ctx_slot=2048)
    assert context_sizes(4096, 2, n_ctx_train=0, slot_cap=1000) == ContextSizes(n_ctx=4096, n_ctx_slot=1000)
