"""What ``Engine.submit`` refuses before it queues a request, checked without a model."""

from __future__ import annotations

import pytest

from lfmserve.engine.media import media_token_ids
from lfmserve.engine.records import EngineRequest, MediaSpan
from lfmserve.engine.validation import RequestBounds, first_invalid_token
from lfmserve.errors import ContextLengthExceeded, InvalidRequest

BOUNDS = RequestBounds(n_ctx_slot=8, n_vocab=100, n_slots=2, media=False)
MULTIMODAL = RequestBounds(n_ctx_slot=8, n_vocab=100, n_slots=2, media=True)
IMAGE = tuple(int(t) for t in media_token_ids("image", 2))


def _span(start: int) -> MediaSpan:
    return MediaSpan(start, 2, "image", chunk=None)


def test_a_request_within_the_bounds_passes() -> None:
    BOUNDS.check(EngineRequest(prompt_tokens=(0, 1, 99)))
    BOUNDS.check(EngineRequest(prompt_tokens=tuple(range(7)), id_slot=1))  # one position left to generate into
    MULTIMODAL.check(EngineRequest(prompt_tokens=(1, *IMAGE, 2), media=(_span(1),)))


def test_the_prompt_must_hold_a_token_and_leave_room_in_its_slot() -> None:
    with pytest.raises(InvalidRequest, match="The prompt is empty") as empty:
        BOUNDS.check(EngineRequest(prompt_tokens=()))
    assert empty.value.param == "prompt"
    with pytest.raises(ContextLengthExceeded) as long:
        BOUNDS.check(EngineRequest(prompt_tokens=tuple(range(8))))
    assert (long.value.n_prompt_tokens, long.value.n_ctx) == (8, 8)
    assert str(long.value) == "request (8 tokens) exceeds the available context size (8 tokens), try increasing it"


def test_media_needs_a_projector_and_spans_that_match_the_prompt() -> None:
    request = EngineRequest(prompt_tokens=(1, *IMAGE, 2), media=(_span(1),))
    with pytest.raises(InvalidRequest, match="^this model has no multimodal projector$"):
        BOUNDS.check(request)
    with pytest.raises(InvalidRequest, match="^the media spans do not match the prompt's media positions$") as bad:
        MULTIMODAL.check(EngineRequest(prompt_tokens=(1, *IMAGE, 2), media=(_span(2),)))
    assert bad.value.param == "prompt"


@pytest.mark.parametrize(
    ("tokens", "bad"),
    [((1, 100, 2), 100), ((1, -1, 200), -1), ((5, 2**64, 3), 2**64), ((-(2**63) - 1,), -(2**63) - 1)],
)
def test_token_ids_outside_the_vocabulary_are_refused(tokens: tuple[int, ...], bad: int) -> None:
    with pytest.raises(InvalidRequest) as refused:
        BOUNDS.check(EngineRequest(prompt_tokens=tokens))
    assert str(refused.value) == f"Invalid token id {bad} in the prompt (vocabulary has 100)"
    assert refused.value.param == "prompt"


def test_the_first_invalid_token_skips_media_positions_only() -> None:
    assert first_invalid_token(EngineRequest(prompt_tokens=(3, *IMAGE, 4), media=(_span(1),)), 100) is None
    assert first_invalid_token(EngineRequest(prompt_tokens=(3, *IMAGE, 4)), 100) == IMAGE[0]
    assert first_invalid_token(EngineRequest(prompt_tokens=(3, *IMAGE, -7), media=(_span(1),)), 100) == -7
    assert first_invalid_token(EngineRequest(prompt_tokens=(0, 99)), 100) is None


def test_the_slot_asked_for_must_exist() -> None:
    with pytest.raises(InvalidRequest) as refused:
        BOUNDS.check(EngineRequest(prompt_tokens=(1,), id_slot=2))
    assert str(refused.value) == "id_slot 2 does not exist (there are 2 slots)"
    assert refused.value.param == "id_slot"
