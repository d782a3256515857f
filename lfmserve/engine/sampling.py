"""One request's sampling: llama-server's order, with the cheap parts done on the logits in numpy.

logit bias -> penalties -> grammar -> top-k -> typical -> top-p -> min-p -> temperature -> dist(seed). Bias and
penalties are applied by :class:`~lfmserve.engine.penalties.LogitAdjuster` (only the window's tokens
change), a grammar by its :class:`~lfmserve.engine.records.TokenConstraint`, the rest by llama.cpp's
:class:`~lfmserve.llama.sampler.SamplerChain`. At temperature <= 0 the chain's answer is the most likely
token (top-k, top-p and min-p always keep it), so greedy sampling is an argmax and builds no chain.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ..llama.context import NativeContext
from ..llama.model import NativeModel
from ..llama.sampler import SamplerChain
from .penalties import LogitAdjuster
from .records import SamplingParams, TokenConstraint, TokenLogprob


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
        self._adjuster = LogitAdjuster(params, n_ctx=n_ctx, eog_tokens=model.eog_tokens)
        greedy = params.is_greedy and params.typical_p >= 1.0  # typical-p may drop the most likely token
        self._chain = None if greedy else SamplerChain(params, model.n_vocab)
        if self._adjuster.penalised:
            for token in history[-self._adjuster.window :]:  # the window sees the prompt too, as in llama-server
                if token >= 0:  # not a media position (``engine.media``)
                    self._adjuster.accept(token)

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
