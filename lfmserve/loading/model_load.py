"""The model's weights loaded as the settings say, ``--fit`` first: the part of a start that the server begins
before anything else, so it imports only what loading the weights needs (the chat and engine layers are
imported beside it, by the app, while llama.cpp reads the file with the GIL released).
"""

from __future__ import annotations

import logging
import os

from ..llama.backend import init_numa
from ..llama.model import NativeModel
from ..settings import Settings
from .engine_config import engine_config
from .files import ModelFiles
from .fit import measured_fit
from .placement import model_placement

logger = logging.getLogger(__name__)


def load_weights(settings: Settings, files: ModelFiles) -> tuple[Settings, NativeModel]:
    """The settings with ``--fit``'s context, and the model loaded with them."""
    settings = fitted_settings(settings, files)
    return settings, load_model(settings, files.model)


def load_model(settings: Settings, path: str, *, no_alloc: bool = False) -> NativeModel:
    """The model's weights, placed and checked as the settings say; ``no_alloc``: only planned, to measure.
    ``--numa`` is set up first, as llama-server does, so that llama.cpp maps the weights for it."""
    if settings.threads.numa is not None:
        init_numa(settings.threads.numa)
    weights = settings.weights
    return NativeModel(
        path,
        placement=model_placement(settings.devices),
        repack=weights.repack,
        load_mode=weights.model_load_mode,
        lazy_mode=weights.lazy_mode,
        kv_overrides=weights.override_kv,
        check_tensors=weights.check_tensors,
        no_alloc=no_alloc,
    )


def fitted_settings(settings: Settings, files: ModelFiles) -> Settings:
    """The settings with ``--fit``'s context (:mod:`.fit`) when ``-c`` is left to the model: unchanged when the
    model's context fits in memory, or with ``--fit off`` or ``-c N``."""
    devices = settings.devices
    config = engine_config(settings, files.draft)
    if not devices.fit or config.n_ctx:
        return settings
    probe = load_model(settings, files.model, no_alloc=True)
    try:
        margin = devices.fit_target[0] * 2**20 + (os.path.getsize(files.projector) if files.projector else 0)
        fit = measured_fit(probe, config, n_ctx_min_per_slot=devices.fit_ctx, margin=margin)
        full = config.context_sizes(probe.info.n_ctx_train).n_ctx
    finally:
        probe.close()
    if fit.fits:
        logger.info("--fit: context %d tokens: %s", fit.n_ctx, fit.reason)
    else:
        logger.warning("--fit: could not fit the model in host memory: %s; context %d tokens", fit.reason, fit.n_ctx)
    return settings if fit.n_ctx == full else settings.replace(ctx_size=fit.n_ctx)
