"""Speculative decoding: tokens guessed ahead of the model, verified in the step's batch.

Decoding one token costs a pass over the weights; checking guessed tokens in the same batch costs less
than decoding each. The batch step decodes a generation's pending token and its draft together; the
generation samples each position in turn and keeps the drafted tokens while they are what it samples, and
the rejected tail is removed from the slot's memory (a recurrent state is restored from a snapshot,
``step.BatchStep``). The output is the one decoding without a draft gives as long as every verifying batch is
one llama.cpp's kernels compute as single decodes (:mod:`.exactness`, ``--spec-exact``); in larger ones, near
ties can round either way.

- :mod:`.config`: ``--spec-type`` and the drafters' sizes.
- :mod:`.ngram`, :mod:`.ngram_mod`, :mod:`.ngram_cache`: drafts from the request's own tokens.
- :mod:`.draft_model`: ``draft-simple``, a smaller model's guesses.
- :mod:`.worth`: how much of a guess is worth verifying, from each slot's measured acceptance.
- :mod:`.exactness`: the largest batch the kernels compute as single decodes, which drafts stay within.
- :mod:`.speculator`: each step's drafts, from those parts.

The package exports the model-free parts (the request records import the config, and they load without
llama.cpp); the drafter that runs a model and the speculator using it are imported from their modules.
"""

from .config import SPEC_TYPES, NgramModSizes, NgramSizes, SpeculationConfig, resolve_synth_rates
from .worth import Acceptance, best_draft_length

__all__ = [
    "SPEC_TYPES",
    "Acceptance",
    "NgramModSizes",
    "NgramSizes",
    "SpeculationConfig",
    "best_draft_length",
    "resolve_synth_rates",
]
