"""What ``Engine.submit`` refuses before it queues a request: an empty or too long prompt, media the engine
cannot take, token ids outside the vocabulary and a slot that does not exist.

These checks run on the caller's thread, so a bad request fails at once with a client error instead of
after it has waited for a slot. They read only what is fixed when the engine starts, so they never have
to ask the engine thread.

Example::

    bounds = RequestBounds(n_ctx_slot=1024, n_vocab=65536, n_slots=4, media=False)
    bounds.check(EngineRequest(prompt_tokens=(1, 6, 7)))  # raises InvalidRequest or ContextLengthExceeded
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ContextLengthExceeded, InvalidRequest
from .media import spans_match_prompt
from .records import EngineRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestBounds:
    """The engine's fixed limits that every request must fit; frozen, so any thread may read them."""

    #: Each slot's share of the context: a prompt must leave room in it for one generated token.
    n_ctx_slot: int
    n_vocab: int
    n_slots: int
    #: A multimodal projector encodes media chunks; without one, a request with media is refused.
    media: bool

    def check(self, request: EngineRequest) -> None:
        """Raise the error of the first rule ``request`` breaks; the length checks come first, since they are cheap."""
        n = len(request.prompt_tokens)
        if n == 0:
            raise InvalidRequest("The prompt is empty", param="prompt")
        if n >= self.n_ctx_slot:
            raise ContextLengthExceeded(n, self.n_ctx_slot)
        if request.media:
            if not self.media:
                raise InvalidRequest("this model has no multimodal projector", param="prompt")
            if not spans_match_prompt(request.prompt_tokens, request.media):
                raise InvalidRequest("the media spans do not match the prompt's media positions", param="prompt")
        bad = first_invalid_token(request, self.n_vocab)
        if bad is not None:
            raise InvalidRequest(
                f"Invalid token id {bad} in the prompt (vocabulary has {self.n_vocab})", param="prompt"
            )
        if request.id_slot >= self.n_slots:
            raise InvalidRequest(
                f"id_slot {request.id_slot} does not exist (there are {self.n_slots} slots)", param="id_slot"
            )


def first_invalid_token(request: EngineRequest, n_vocab: int) -> int | None:
    """The first prompt id outside the vocabulary, media positions aside (whose ids are the engine's).

    The ids go through numpy at once because prompts run to thousands of tokens; an id beyond 64 bits
    cannot, so that case is found one id at a time.
    """
    try:
        tokens = np.asarray(request.prompt_tokens, dtype=np.int64)
    except OverflowError:
        return next(t for t in request.prompt_tokens if not -(2**63) <= t < 2**63)
    valid = (tokens >= 0) & (tokens < n_vocab)
    for span in request.media:
        valid[span.start : span.end] = True
    return None if valid.all() else int(tokens[np.flatnonzero(~valid)[0]])
