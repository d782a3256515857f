"""``--spec-type`` and the sizes of each drafter, as llama-server spells and defaults them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import EngineError

#: The ``--spec-type`` values, in llama-server's order of preference: for each step, the first that drafts
#: something is used (``common_speculative_init``).
SPEC_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache", "draft-simple")
#: ``ngram-cache``'s draft length (llama-server's is fixed too).
NGRAM_CACHE_DRAFT = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class NgramSizes:
    """An n-gram drafter's sizes: ``size_n`` tokens looked up, up to ``size_m`` drafted after a match."""

    size_n: int = 12
    size_m: int = 48
    #: ``ngram-map-k4v``: how often the key must have been seen before its values are drafted.
    min_hits: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class NgramModSizes:
    """``ngram-mod``: ``n_match`` tokens hashed to the one that followed them; drafts of ``n_min``..``n_max``."""

    n_match: int = 24
    n_min: int = 48
    n_max: int = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculationConfig:
    """The drafters a server runs and their flags."""

    types: tuple[str, ...] = ()
    #: ``draft-simple``: tokens the draft model guesses per step (``--spec-draft-n-max``).
    n_max: int = 3
    #: Drafts shorter than this are not verified (``--spec-draft-n-min``).
    n_min: int = 0
    #: ``draft-simple``: the draft model stops guessing below this probability (``--spec-draft-p-min``).
    p_min: float = 0.0
    ngram_simple: NgramSizes = field(default_factory=NgramSizes)
    ngram_map_k: NgramSizes = field(default_factory=NgramSizes)
    ngram_map_k4v: NgramSizes = field(default_factory=NgramSizes)
    ngram_mod: NgramModSizes = field(default_factory=NgramModSizes)
    #: ``draft-simple``'s model file (``-md``, or resolved from ``-hfd``).
    draft_model: str | None = None
    #: ``draft-simple``'s threads (``-td``, ``-tbd``; None: the target's, and ``-td`` for ``-tbd``).
    n_threads: int | None = None
    n_threads_batch: int | None = None
    #: ``draft-simple``'s KV cache types (``-ctkd``, ``-ctvd``).
    type_k: str = "f16"
    type_v: str = "f16"
    #: ``--spec-synth-rates`` / ``--spec-synth-len``: each draft position's chance of being kept whatever the model
    #: says (llama-server's benchmarking mode; empty: drafts are verified).
    synth_rates: tuple[float, ...] = ()
    #: ``--spec-exact``: drafts verified only in batches whose rows come out as single decodes'
    #: (:mod:`.exactness`); off, in batches of any size, as llama-server verifies them.
    exact: bool = False

    def __post_init__(self) -> None:
        if "draft-simple" in self.types and not self.draft_model:
            raise EngineError("--spec-type draft-simple needs a draft model (-md FILE or -hfd REPO)")

    @property
    def enabled(self) -> bool:
        return bool(self.types)

    @property
    def type_names(self) -> str:
        """As llama-server reports them (``/props`` ``params["speculative.types"]``): comma-joined, or none."""
        return ",".join(self.types) or "none"

    @property
    def max_draft(self) -> int:
        """The longest draft any of the drafters makes."""
        sizes = {
            "ngram-simple": self.ngram_simple.size_m,
            "ngram-map-k": self.ngram_map_k.size_m,
            "ngram-map-k4v": self.ngram_map_k4v.size_m,
            "ngram-mod": self.ngram_mod.n_max,
            "ngram-cache": NGRAM_CACHE_DRAFT,
            "draft-simple": self.n_max,
        }
        return max((sizes[t] for t in self.types), default=0)


def resolve_synth_rates(length: float | None, rates: tuple[float, ...], n_max: int) -> tuple[float, ...]:
    """``--spec-synth-len`` or ``--spec-synth-rates`` as each draft position's chance of being kept, checked as
    llama-server checks them (``n_max``: the longest draft). A mean length ``L`` gives the rates ``p, p**2, ...``
    whose sum is ``L - 1``."""
    if length is None and not rates:
        return ()
    if length is not None and rates:
        raise EngineError("synthetic acceptance length and rates are mutually exclusive")
    if n_max <= 0:
        raise EngineError("synthetic acceptance requires at least one speculative token")
    if rates:
        if len(rates) != n_max:
            raise EngineError(f"synthetic acceptance rates must contain {n_max} values, got {len(rates)}")
        if not all(0.0 <= rate <= 1.0 for rate in rates):  # NaN fails this too
            raise EngineError("synthetic acceptance rates must be finite and within [0, 1]")
        if any(later > earlier for earlier, later in zip(rates, rates[1:], strict=False)):
            raise EngineError("synthetic acceptance rates must be monotonically non-increasing")
        return rates
    assert length is not None
    if not 1.0 <= length <= n_max + 1.0:
        raise EngineError(f"synthetic acceptance length must be finite and within [1, {n_max + 1}]")
    low, high = 0.0, 1.0
    for _ in range(32):  # bisection, as llama-server's
        mid = (low + high) / 2
        low, high = (mid, high) if sum(mid ** (j + 1) for j in range(n_max)) < length - 1.0 else (low, mid)
    p = 1.0 if length == n_max + 1.0 else 0.0 if length == 1.0 else (low + high) / 2
    return tuple(p ** (j + 1) for j in range(n_max))
