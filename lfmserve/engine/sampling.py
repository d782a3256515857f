"""One request's sampling: llama-server's chain, with the cheap parts done on the logits in numpy.

llama-server applies the logit bias, then the samplers in the request's ``samplers`` order, then picks with
``dist`` (or adaptive-p when the order names it); Mirostat replaces everything after the bias with temperature
and Mirostat. Here the bias, and the penalties when they come first (the default order),
are applied by :class:`~lfmserve.engine.penalties.LogitAdjuster` (only the window's tokens change), a grammar
by its :class:`~lfmserve.engine.records.TokenConstraint`, and the rest by llama.cpp's
:class:`~lfmserve.llama.sampler.SamplerChain`, built from the samplers the settings turn on (one left at its
"off" value changes nothing in llama.cpp either). At temperature <= 0 the chain's answer is the most likely
token when nothing before the temperature can drop it, so such greedy sampling is an argmax and builds no chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..llama.context import NativeContext
from ..llama.model import NativeModel
from ..llama.sampler import SamplerChain
from .penalties import LogitAdjuster
from .records import SamplingParams, TokenConstraint, TokenLogprob

#: Samplers that always keep the most likely token: before a zero temperature they leave greedy an argmax.
_KEEP_THE_TOP = frozenset({"top_n_sigma", "top_k", "top_p", "min_p"})


@dataclass(frozen=True, slots=True)
class ChainPlan:
    """How one request's settings are carried out."""

    #: The penalties are applied in numpy before the chain (they come first in the order).
    numpy_penalties: bool
    #: The native chain's stages in order, ending with what picks the token; empty for greedy sampling.
    stages: tuple[str, ...]

    @property
    def greedy(self) -> bool:
        return not self.stages

    @property
    def windowed(self) -> bool:
        """The chain keeps a window of recent tokens, so it is told the prompt's."""
        return "penalties" in self.stages or "dry" in self.stages


def plan_chain(params: SamplingParams) -> ChainPlan:
    """The stages llama-server's chain would run for ``params`` that change anything."""
    if params.mirostat:
        return ChainPlan(False, ("mirostat",))
    order = params.samplers
    numpy_penalties = bool(order) and order[0] == "penalties"
    acting = _acting(params)
    active = [
        name
        for index, name in enumerate(order)
        if acting.get(name, True) and not (index == 0 and numpy_penalties)  # temperature, infill, adaptive-p act
    ]
    before = active[: active.index("temperature")] if "temperature" in active else None
    if (
        params.is_greedy
        and params.dynatemp_range <= 0.0
        and before is not None
        and set(before) <= _KEEP_THE_TOP
        and "infill" not in active
    ):
        return ChainPlan(numpy_penalties, ())
    picker = "adaptive_p" if "adaptive_p" in active else "dist"
    return ChainPlan(numpy_penalties, (*(name for name in active if name != "adaptive_p"), picker))


def _acting(p: SamplingParams) -> dict[str, bool]:
    """Whether each of llama.cpp's samplers that has an "off" value does anything with these settings (each returns
    early, or is built empty, at that value)."""
    return {
        "penalties": p.penalises,
        "dry": p.dry_multiplier != 0.0 and p.dry_base >= 1.0 and p.dry_penalty_last_n != 0,
        "top_n_sigma": p.top_n_sigma > 0.0,
        "top_k": p.top_k > 0,
        "typ_p": p.typical_p < 1.0,
        "top_p": p.top_p < 1.0,
        "min_p": p.min_p > 0.0,
        "xtc": p.xtc_probability > 0.0 and p.xtc_threshold <= 0.5,
    }


class Sampler:
    def __init__(
        self,
        model: NativeModel,
        params: SamplingParams,
        history: Sequence[int],
        n_ctx: int,
        *,
        constraint: TokenConstraint | None = None,
        n_probs: int = 0,
        post_sampling: bool = False,
    ) -> None:
        self._constraint = constraint
        self._n_probs = n_probs
        self._post_sampling = post_sampling and n_probs > 0
        #: The last sampled token's probabilities (when ``n_probs`` > 0).
        self.last_logprob: TokenLogprob | None = None
        plan = plan_chain(params)
        self._adjuster = LogitAdjuster(
            params, n_ctx=n_ctx, eog_tokens=model.eog_tokens, with_penalties=plan.numpy_penalties
        )
        window = n_ctx if params.repeat_last_n < 0 else params.repeat_last_n
        self._chain = None
        if not plan.greedy:
            self._chain = SamplerChain(params, model, plan.stages, penalty_last_n=window)
        # The windows see the prompt too, as in llama-server; media positions (negative ids) are not tokens.
        if self._adjuster.penalised:
            for token in history[-self._adjuster.window :]:
                if token >= 0:
                    self._adjuster.accept(token)
        if self._chain is not None and plan.windowed:
            for token in history[-max(window, params.dry_penalty_last_n) :]:
                if token >= 0:
                    self._chain.accept(token)

    @property
    def grammar_finished(self) -> bool:
        return self._constraint is not None and self._constraint.finished

    def sample(
        self,
        ctx: NativeContext,
        batch_index: int,
        stored_logits: npt.NDArray[np.float32] | None = None,
        *,
        force: int | None = None,
    ) -> int:
        """The next token from the logits at ``batch_index`` (adjusted in place), or from ``stored_logits``;
        ``force``: that token instead (a reasoning budget ending the thinking), taken as if it had been sampled."""
        constrained = self._constraint is not None and self._constraint.active
        raw = None
        logits = stored_logits
        if logits is not None or self._adjuster.active or self._chain is None or constrained or self._n_probs:
            if logits is None:
                logits = ctx.logits(batch_index)
            if self._n_probs and not self._post_sampling:
                raw = logits.copy()  # probabilities are the model's, before bias, penalties and grammar
            self._adjuster.apply(logits)
            if constrained:
                self._constraint.apply(logits)  # type: ignore[union-attr]
        kept = None
        if force is not None:
            token = force
            if self._chain is not None:
                self._chain.accept(token)
        elif self._chain is None:
            assert logits is not None  # greedy always reads the row
            token = int(np.argmax(logits))
        elif logits is not None and (stored_logits is not None or self._post_sampling):
            token, kept = self._chain.sample_candidates(logits)
        else:
            token = self._chain.sample(ctx, batch_index)
        self._adjuster.accept(token)
        if self._constraint is not None:
            self._constraint.accept(token)
        if raw is not None:
            self.last_logprob = token_logprob(raw, token, self._n_probs)
        elif self._post_sampling:
            self.last_logprob = kept_logprob(kept if force is None else None, token, self._n_probs)
        return token

    def close(self) -> None:
        if self._chain is not None:
            self._chain.close()
            self._chain = None


def token_logprob(logits: npt.NDArray[np.float32], token: int, n_top: int) -> TokenLogprob:
    """``token``'s log-softmax and the ``n_top`` most likely tokens', most likely first."""
    peak = float(logits.max())
    log_total = peak + float(np.log(np.exp(logits - peak, dtype=np.float32).sum(dtype=np.float64)))
    n_top = min(n_top, logits.size)
    top = np.argpartition(-logits, n_top - 1)[:n_top]
    top = top[np.lexsort((top, -logits[top]))]  # by logit, ties by id
    return TokenLogprob(
        token, float(logits[token]) - log_total, tuple((int(t), float(logits[t]) - log_total) for t in top)
    )


def kept_logprob(kept: npt.NDArray[np.void] | None, token: int, n_top: int) -> TokenLogprob:
    """``token``'s log-probability among the candidates the chain kept, and the ``n_top`` most likely of them,
    those it gave no probability left out (as llama-server leaves them out). ``kept`` is None for greedy
    sampling, where llama-server's chain leaves the chosen token alone, with probability 1."""
    if kept is None:
        return TokenLogprob(token, 0.0, ((token, 0.0),))
    with np.errstate(divide="ignore"):
        logs = np.log(kept["p"].astype(np.float64))
    chosen = float(logs[kept["id"] == token][0])
    order = np.lexsort((kept["id"], -kept["p"]))[: min(n_top, kept.size)]
    return TokenLogprob(token, chosen, tuple((int(kept["id"][i]), float(logs[i])) for i in order if kept["p"][i] > 0))
