"""``--fit``: llama-server's rule for shrinking a context left to the model to what host memory holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from lfmserve.llama.model import NativeModel
from lfmserve.loading.engine_config import engine_config
from lfmserve.loading.files import ModelFiles
from lfmserve.loading.fit import Fit, fit_context, host_memory, measured_fit, used_bytes
from lfmserve.loading.model_load import fitted_settings
from lfmserve.settings import Settings
from lfmserve.settings.placement import FULL_CONTEXT
from lfmserve.testing import TinyLfm2, write_lfm2_gguf

MIB = 2**20


def _linear(n_ctx: int) -> int:
    """A model of 1000 MiB whose context takes 1 MiB per 1024 tokens."""
    return 1000 * MIB + n_ctx * 1024


def test_a_context_that_fits_is_left_as_it_is() -> None:
    fit = fit_context(n_ctx_max=32768, n_ctx_min=4096, align=256, available=1032 * MIB, used_at=_linear)
    assert fit == Fit(32768, True, "projected to use 1032 MiB of 1032 MiB: no change")


def test_one_that_does_not_is_interpolated_down_to_a_multiple_of_the_step() -> None:
    # 1020 MiB hold 20 MiB of context: 20480 tokens, the largest multiple of 256 * 2 that fits.
    fit = fit_context(n_ctx_max=32768, n_ctx_min=8192, align=512, available=1020 * MIB, used_at=_linear)
    assert fit == Fit(20480, True, "reduced from 32768 tokens, which would use 1032 MiB")
    fit = fit_context(n_ctx_max=32768, n_ctx_min=8192, align=512, available=1020 * MIB + 500 * 1024, used_at=_linear)
    assert fit.n_ctx == 20480  # 500 tokens more would not make a whole step


def test_below_the_minimum_it_takes_the_minimum_and_says_it_does_not_fit() -> None:
    fit = fit_context(n_ctx_max=32768, n_ctx_min=4096, align=256, available=1003 * MIB, used_at=_linear)
    assert fit == Fit(4096, False, "projected to use 1004 MiB of 1003 MiB even at the minimum")


def test_a_full_context_asked_for_or_one_already_at_the_minimum_is_never_shrunk() -> None:
    fit = fit_context(n_ctx_max=32768, n_ctx_min=FULL_CONTEXT, align=256, available=1010 * MIB, used_at=_linear)
    assert fit == Fit(32768, False, "projected to use 1032 MiB of 1010 MiB, and the full context was asked for (-c 0)")
    fit = fit_context(n_ctx_max=4096, n_ctx_min=4096, align=256, available=1000 * MIB, used_at=_linear)
    assert fit == Fit(4096, False, "projected to use 1004 MiB of 1000 MiB, and the context is no more than --fit-ctx")


@pytest.fixture(scope="module")
def long_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny LFM2 trained on 32768 tokens: room to shrink."""
    return write_lfm2_gguf(tmp_path_factory.mktemp("fit") / "long.gguf", TinyLfm2(seed=3, context_length=32768))


def test_the_measure_plans_without_allocating_and_finds_the_largest_step_that_fits(long_gguf: Path) -> None:
    probe = NativeModel(long_gguf, no_alloc=True)
    try:
        assert probe.buffers == {"CPU": 0}  # nothing read nor allocated
        config = engine_config(Settings.of(model=str(long_gguf), parallel=2))
        small, large = used_bytes(probe, config, 2048), used_bytes(probe, config, 32768)
        assert small < large  # the KV cache is planned though not allocated
        middle = (small + large) // 2
        fit = measured_fit(probe, config, n_ctx_min_per_slot=1024, margin=MIB, total=middle + MIB)
        assert 2048 < fit.n_ctx < 32768 and fit.n_ctx % 512 == 0 and fit.fits
        assert used_bytes(probe, config, fit.n_ctx) <= middle < used_bytes(probe, config, fit.n_ctx + 512)
        assert measured_fit(probe, config, n_ctx_min_per_slot=1024, margin=MIB, total=large + MIB).n_ctx == 32768
    finally:
        probe.close()


def _fitted(path: Path, argv: list[str]) -> Settings:
    return fitted_settings(Settings.from_argv(["-m", str(path), "-np", "2", *argv], {}), ModelFiles(str(path)))


def test_a_context_left_to_the_model_is_fitted_but_not_one_asked_for(long_gguf: Path) -> None:
    everything = str(host_memory() // MIB)  # a margin of all the memory there is: nothing fits
    assert _fitted(long_gguf, ["-fitt", everything, "-fitc", "1024"]).engine.ctx_size == 2048  # 1024 a slot
    assert _fitted(long_gguf, ["-fitt", everything]).engine.ctx_size == 8192  # --fit-ctx's default: 4096 a slot
    assert _fitted(long_gguf, ["-fitt", everything, "-fitc", "1024", "-c", "0"]).engine.ctx_size == 0
    assert _fitted(long_gguf, ["-fitt", everything, "-c", "0", "-fitc", "1024"]).engine.ctx_size == 2048
    assert _fitted(long_gguf, ["-fitt", everything, "-fitc", "1024", "--fit", "off"]).engine.ctx_size == 0
    assert _fitted(long_gguf, ["-fitt", everything, "-fitc", "1024", "-c", "8192"]).engine.ctx_size == 8192
    assert _fitted(long_gguf, ["-fitc", "1024"]).engine.ctx_size == 0  # it fits: unchanged
