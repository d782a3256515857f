"""``--spec-type`` and the drafters' sizes: what a configuration enables, reports and drafts at most."""

from __future__ import annotations

import pytest

from lfmserve.engine.speculation import SPEC_TYPES, NgramModSizes, NgramSizes, SpeculationConfig
from lfmserve.errors import EngineError


def test_no_type_is_speculation_off() -> None:
    off = SpeculationConfig()
    assert (off.enabled, off.type_names, off.max_draft) == (False, "none", 0)


def test_the_longest_draft_is_the_largest_of_the_chosen_drafters_sizes() -> None:
    both = SpeculationConfig(
        types=("ngram-simple", "ngram-mod"),
        ngram_simple=NgramSizes(size_n=4, size_m=10),
        ngram_mod=NgramModSizes(n_match=8, n_min=2, n_max=20),
    )
    assert (both.enabled, both.type_names, both.max_draft) == (True, "ngram-simple,ngram-mod", 20)
    # The defaults are llama-server's: 48 tokens after a 12-token match, 64 from ngram-mod, 8 from ngram-cache.
    assert SpeculationConfig(types=("ngram-map-k",)).max_draft == 48
    assert SpeculationConfig(types=("ngram-mod",)).max_draft == 64
    assert SpeculationConfig(types=("ngram-cache",)).max_draft == 8
    assert SpeculationConfig(types=("draft-simple",), n_max=5, draft_model="draft.gguf").max_draft == 5


def test_draft_simple_needs_a_draft_model() -> None:
    with pytest.raises(EngineError, match=r"^--spec-type draft-simple needs a draft model \(-md FILE or -hfd REPO\)$"):
        SpeculationConfig(types=("draft-simple",))


def test_the_types_are_llama_servers_in_its_order() -> None:
    assert SPEC_TYPES == ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache", "draft-simple")
