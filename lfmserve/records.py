"""The records passed between the serving layer and the engine thread."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from .sampling import SamplingParams

if TYPE_CHECKING:
    from .constraints import TokenMask

#: A saved sequence state, as ``llama_state_seq_get_data_ext`` wrote it (checkpoints, the RAM cache).
StateBuffer = npt.NDArray[np.uint8]
FinishReason = Literal["stop", "length"]
#: How generation ended, with llama-server's names: end of generation token, stop string, limit.
StopType = Literal["eos", "word", "limit"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineRequest:
    """A tokenized prompt and how to continue it."""

    prompt_tokens: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    #: Tokens to generate; -1 = until end of generation or the context is full; 0 = only prefill.
    max_tokens: int = -1
    stop: tuple[str, ...] = ()
    cache_prompt: bool = True
    #: Slot to run in, or -1 for the engine's choice.
    id_slot: int = -1
    #: Special tokens whose text is kept in the output (tool-call markers); others render empty.
    keep_special: frozenset[int] = frozenset()
    #: Grammar the output must follow (one request's state: a request is submitted once).
    mask: TokenMask | None = field(default=None, compare=False)
    #: Report the ``n_probs`` most likely tokens (and the chosen one's log-probability) at each step.
    n_probs: int = 0


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """A generated token's log-probability under the model, and the most likely alternatives."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass(slots=True)
class Timings:
    """llama-server's ``timings`` object, filled as the request runs."""

    cache_n: int = 0
    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "cache_n": self.cache_n,
            "prompt_n": self.prompt_n,
            "prompt_ms": self.prompt_ms,
            "prompt_per_token_ms": self.prompt_ms / self.prompt_n if self.prompt_n else 0.0,
            "prompt_per_second": 1e3 * self.prompt_n / self.prompt_ms if self.prompt_ms > 0 else 0.0,
            "predicted_n": self.predicted_n,
            "predicted_ms": self.predicted_ms,
            "predicted_per_token_ms": self.predicted_ms / self.predicted_n if self.predicted_n else 0.0,
            "predicted_per_second": 1e3 * self.predicted_n / self.predicted_ms if self.predicted_ms > 0 else 0.0,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOutput:
    """One step of one request: new text and tokens; the last one carries ``finish_reason``."""

    text: str
    token_ids: tuple[int, ...]
    id_slot: int
    n_prompt_tokens: int
    n_cached_tokens: int
    n_decoded: int
    timings: Timings
    finish_reason: FinishReason | None = None
    stop_type: StopType | None = None
    stopping_word: str = ""
    #: One entry per token in ``token_ids`` when the request asked for probabilities.
    logprobs: tuple[TokenLogprob, ...] = ()

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
