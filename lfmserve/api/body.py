"""Request-body parsing shared by every API family, and the generation fields every generation route takes.

Bodies are pydantic models parsed from the raw bytes in JSON mode with strict types, so
``"temperature": "hot"`` or ``"stream": 1`` is a 400, not a silent coercion; unknown fields are
ignored, as llama-server and the OpenAI API do. Wire names are converted once, when a body is adapted
into the chat layer's neutral records (``max_completion_tokens`` / ``max_tokens`` / ``n_predict`` ->
``max_tokens``). Pydantic appears in the API layer only.
"""

from __future__ import annotations

import math
import threading
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..chat.request import GenerationOptions
from ..engine.records import SAMPLING_NAMES
from ..errors import InvalidRequest
from ..sampler_order import order_from_codes, order_from_names

#: The largest value llama.cpp's ``int32_t`` parameters take (top-k, the penalty window).
INT32_MAX = 2**31 - 1


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


Finite = Annotated[float, AfterValidator(_finite)]
NonNegative = Annotated[float, Field(ge=0.0), AfterValidator(_finite)]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
TokenCount = Annotated[int, Field(ge=-1)]
#: A token window or length: llama-server's hard limits, 0 to ``INT32_MAX``.
Window = Annotated[int, Field(ge=0, le=INT32_MAX)]
#: 0 (off), Mirostat 1 or Mirostat 2.
MirostatVersion = Annotated[int, Field(ge=0, le=2)]
#: Adaptive-p's target probability (negative: off) and its history's decay, llama-server's limits.
AdaptiveTarget = Annotated[float, Field(le=1.0), AfterValidator(_finite)]
AdaptiveDecay = Annotated[float, Field(ge=0.0, le=0.99)]

#: The sampling fields a body sets by name; logit_bias is resolved against the vocabulary separately.
_SAMPLING_FIELDS = set(SAMPLING_NAMES - {"logit_bias"})


class Body(BaseModel):
    """Strict types, unknown fields ignored. A model builds its validator when it first parses a body
    (:func:`built`), not when it is imported: a server starts without building the models of the API families it is
    never asked for."""

    model_config = ConfigDict(strict=True, extra="ignore", defer_build=True)


class StreamOptions(Body):
    include_usage: bool = False


class LoraScale(Body):
    """One entry of a ``lora`` list (a request's, or ``POST /lora-adapters``'s body)."""

    id: int
    scale: float = 0.0


class SamplingFields(Body):
    """The sampling and generation fields shared by every generation route (named as SamplingParams' fields)."""

    temperature: NonNegative | None = None
    top_k: int | None = Field(default=None, ge=-1, le=INT32_MAX)
    top_p: Probability | None = None
    min_p: Probability | None = None
    typical_p: Probability | None = None
    repeat_penalty: NonNegative | None = None
    repeat_last_n: int | None = Field(default=None, ge=-1, le=INT32_MAX)
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    dynatemp_range: Finite | None = None
    dynatemp_exponent: Finite | None = None
    top_n_sigma: Finite | None = None
    xtc_probability: Probability | None = None
    xtc_threshold: Probability | None = None
    dry_multiplier: Finite | None = None
    #: Below 1 (where DRY would do nothing) the server's base, as llama-server reads it.
    dry_base: Finite | None = None
    dry_allowed_length: Window | None = None
    dry_penalty_last_n: Window | None = None
    dry_sequence_breakers: tuple[str, ...] | None = Field(default=None, min_length=1)
    mirostat: MirostatVersion | None = None
    mirostat_tau: Finite | None = None
    mirostat_eta: Finite | None = None
    adaptive_target: AdaptiveTarget | None = None
    adaptive_decay: AdaptiveDecay | None = None
    min_keep: Window | None = None
    #: The chain's order: llama-server's sampler names, or a string of their letters (``"kpt"``).
    samplers: tuple[str, ...] | None = None
    seed: int | None = None
    logit_bias: dict[str, float | bool] | list[list[int | float | bool | str]] | None = None
    #: None: the server's (``--ignore-eos``).
    ignore_eos: bool | None = None
    stop: str | list[str] | None = None
    n_predict: TokenCount | None = None
    max_tokens: TokenCount | None = None
    #: A context shift keeps this many prompt tokens (-1: all; None: ``--keep``) and drops ``n_discard`` (0: half).
    n_keep: Annotated[int, Field(ge=-1, le=INT32_MAX)] | None = None
    n_discard: Window = 0
    #: None: the server's ``--cache-prompt`` / ``--no-cache-prompt``.
    cache_prompt: bool | None = None
    id_slot: int = Field(default=-1, ge=-1)
    timings_per_token: bool = False
    #: Stream ``prompt_progress`` reports while the prompt is prefilled (llama-server reads it on every route).
    return_progress: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1)
    model: str | None = None
    #: llama-server's native constraints: a JSON schema or a GBNF grammar (not both).
    json_schema: dict[str, Any] | bool | None = None
    grammar: str | None = None
    #: llama-server's native probabilities: the top ``n_probs`` tokens at each step.
    n_probs: int = Field(default=0, ge=0, le=100)
    #: The probabilities after the sampler chain (``prob``, ``top_probs``) rather than the model's.
    post_sampling_probs: bool = False
    #: llama-server's GPU sampling: shown in ``generation_settings``; sampling runs on the CPU either way.
    backend_sampling: bool | None = None
    #: The generated token ids in llama-server's final object (``tokens``; a stream's chunks carry theirs).
    return_tokens: bool = False
    #: llama-server's final object cut down to these fields; ``a/b`` is ``b`` of ``a``, moved to the root.
    response_fields: list[str] = Field(default_factory=list)
    #: Speculative decoding for this request: ``false`` turns it off, ``speculative.n_max`` caps a draft.
    speculative: bool = True
    speculative_n_max: int | None = Field(default=None, ge=0, le=INT32_MAX, alias="speculative.n_max")
    #: LoRA adapters for this request, ``[{"id": 0, "scale": 0.5}]``; the ones not listed at 0.
    lora: list[LoraScale] | None = None

    @model_validator(mode="after")
    def _one_constraint(self) -> SamplingFields:
        if self.json_schema is not None and self.grammar is not None:
            raise ValueError("use either 'json_schema' or 'grammar', not both")
        return self

    @field_validator("dry_base", mode="after")
    @classmethod
    def _dry_base(cls, value: float | None) -> float | None:
        return None if value is None or value < 1.0 else value

    @field_validator("samplers", "dry_sequence_breakers", mode="before")
    @classmethod
    def _array(cls, value: Any, info: ValidationInfo) -> Any:
        """A JSON array read as a tuple (settings are immutable); a ``samplers`` string as its letters' names."""
        if isinstance(value, str) and info.field_name == "samplers":
            return order_from_codes(value)
        return tuple(value) if isinstance(value, list) else value

    @field_validator("samplers", mode="after")
    @classmethod
    def _sampler_names(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if value is None else order_from_names(value)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens if self.max_tokens is not None else self.n_predict

    def top_probs(self) -> int | None:
        """How many alternatives to report per token, or None when no probabilities were asked for."""
        return self.n_probs or None

    def generation_options(self) -> GenerationOptions:
        """The fields as the chat layer takes them."""
        return GenerationOptions(
            sampling=self.model_dump(include=_SAMPLING_FIELDS, exclude_none=True),
            logit_bias=self._logit_bias_pairs(),
            max_tokens=self.requested_max_tokens(),
            stop=(self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ()),
            cache_prompt=self.cache_prompt,
            id_slot=self.id_slot,
            json_schema=self.json_schema,
            grammar=self.grammar,
            n_probs=self.top_probs(),
            post_sampling_probs=self.post_sampling_probs,
            draft_max=0 if not self.speculative else self.speculative_n_max,
            lora=None if self.lora is None else tuple((entry.id, entry.scale) for entry in self.lora),
            n_keep=self.n_keep,
            n_discard=self.n_discard,
        )

    def _logit_bias_pairs(self) -> tuple[tuple[Any, ...], ...]:
        """OpenAI's ``{"id": bias}`` or llama-server's ``[[id or text, bias or false], ...]``, as entries."""
        raw = self.logit_bias
        if not raw:
            return ()
        return tuple(raw.items()) if isinstance(raw, dict) else tuple(tuple(entry) for entry in raw)


BodyT = TypeVar("BodyT", bound=BaseModel)


#: Held while a body model builds its validator: pydantic's build is not safe in two threads at once, and a large
#: body is parsed off the event loop (:mod:`.offload`) while a small one may be parsed on it.
_BUILDING = threading.Lock()


def built(model: type[BodyT]) -> type[BodyT]:
    """``model`` with its validator and schema built (once, whichever thread asks first)."""
    if not model.__pydantic_complete__:
        with _BUILDING:
            model.model_rebuild()  # nothing to do when another thread built it meanwhile
    return model


def parse_body(model: type[BodyT], raw: bytes) -> BodyT:
    """Validate a raw JSON body; the most specific problem becomes an :class:`InvalidRequest` naming the field.

    A value that matches no member of a union gets an error per member; the deepest one says what is wrong
    (the list item whose part type is unknown, rather than "not a string" for the whole list).
    """
    try:
        return built(model).model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        raise invalid_request(max(errors, key=lambda error: len(error["loc"]))) from None


def invalid_request(error: Any) -> InvalidRequest:
    """One pydantic (or FastAPI) validation error as a 400 naming its field and the value given."""
    location = ".".join(str(part) for part in error["loc"] if not _union_member(part))
    if error["type"] == "json_invalid":
        return InvalidRequest(f"Invalid JSON body: {error['msg'].removeprefix('Invalid JSON: ')}")
    if error["type"] == "missing":
        return InvalidRequest(f"Missing required field '{location}'", param=location)
    if not location:
        return InvalidRequest(f"Invalid request body: {error['msg']}")
    return InvalidRequest(
        f"Invalid value for '{location}': {error['msg']} (got {_short(error.get('input'))})", param=location
    )


def _union_member(part: object) -> bool:
    """A union member's label in pydantic's error location (``str``, ``list[...]``), which no client sent."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool", "none") or "[" in part)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
