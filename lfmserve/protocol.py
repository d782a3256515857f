"""Request bodies of the HTTP API (OpenAI's fields plus llama-server's extras), validated by pydantic.

This is the only pydantic in the package. Bodies are parsed from the raw bytes in JSON mode with
strict types, so ``"temperature": "hot"`` or ``"stream": 1`` is a 400, not a silent coercion; unknown
fields are ignored, as llama-server and the OpenAI API do. Wire names are converted to internal
names once, here (``max_completion_tokens`` / ``max_tokens`` / ``n_predict`` -> ``max_tokens``).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import InvalidRequest

Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
TokenCount = Annotated[int, Field(ge=-1)]


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class TextPart(_Body):
    type: Literal["text"]
    text: str


class MediaPart(_Body):
    type: Literal["image_url", "input_audio", "image"]
    model_config = ConfigDict(strict=True, extra="allow")


class ToolFunction(_Body):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    model_config = ConfigDict(strict=True, extra="allow")


class Tool(_Body):
    type: Literal["function"] = "function"
    function: ToolFunction


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart | MediaPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    @model_validator(mode="after")
    def _content_required(self) -> ChatMessage:
        if self.content is None and self.role != "assistant":
            raise ValueError(f"'{self.role}' messages need 'content'")
        return self


class NamedFunction(_Body):
    name: str


class NamedToolChoice(_Body):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(_Body):
    name: str | None = None
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    """OpenAI's ``response_format``; llama-server also reads a ``schema`` beside ``type: json_object``."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")

    @model_validator(mode="after")
    def _schema_present(self) -> ResponseFormat:
        if self.type == "json_schema" and (self.json_schema is None or self.json_schema.schema_ is None):
            raise ValueError("type 'json_schema' needs json_schema.schema")
        return self

    def output_schema(self) -> dict[str, Any] | bool | None:
        """The schema the output must follow, or None for free text."""
        if self.type == "json_schema":
            return self.json_schema.schema_ if self.json_schema else None
        if self.type == "json_object":
            return self.schema_ if self.schema_ is not None else {"type": "object"}
        return None


class StreamOptions(_Body):
    include_usage: bool = False


class SamplingFields(_Body):
    """The sampling and generation fields shared by every generation route."""

    temperature: float | None = Field(default=None, ge=0.0)
    top_k: int | None = Field(default=None, ge=-1)
    top_p: Probability | None = None
    min_p: Probability | None = None
    typical_p: Probability | None = None
    repeat_penalty: float | None = Field(default=None, ge=0.0)
    repeat_last_n: int | None = Field(default=None, ge=-1)
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    seed: int | None = None
    logit_bias: dict[str, float | bool] | list[list[int | float | bool | str]] | None = None
    ignore_eos: bool = False
    stop: str | list[str] | None = None
    n_predict: TokenCount | None = None
    max_tokens: TokenCount | None = None
    cache_prompt: bool = True
    id_slot: int = Field(default=-1, ge=-1)
    timings_per_token: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1)
    model: str | None = None
    #: llama-server's native constraints: a JSON schema or a GBNF grammar (not both).
    json_schema: dict[str, Any] | bool | None = None
    grammar: str | None = None
    #: llama-server's native probabilities: the top ``n_probs`` tokens at each step.
    n_probs: int = Field(default=0, ge=0, le=100)

    def top_probs(self) -> int | None:
        """How many alternatives to report per token, or None when no probabilities were asked for."""
        return self.n_probs or None

    @model_validator(mode="after")
    def _one_constraint(self) -> SamplingFields:
        if self.json_schema is not None and self.grammar is not None:
            raise ValueError("use either 'json_schema' or 'grammar', not both")
        return self

    @field_validator("temperature", "top_p", "min_p", "typical_p", "repeat_penalty", mode="after")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @property
    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens if self.max_tokens is not None else self.n_predict

    def sampling_overrides(self) -> dict[str, Any]:
        """Fields the request set, under :class:`~lfmserve.sampling.SamplingParams` names."""
        names = (
            "temperature",
            "top_k",
            "top_p",
            "min_p",
            "typical_p",
            "repeat_penalty",
            "repeat_last_n",
            "presence_penalty",
            "frequency_penalty",
            "seed",
        )
        out = {name: getattr(self, name) for name in names if getattr(self, name) is not None}
        out["ignore_eos"] = self.ignore_eos
        return out


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: TokenCount | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_format: Literal["auto", "deepseek", "deepseek-legacy", "none"] | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    response_format: ResponseFormat | None = None
    add_generation_prompt: bool = True
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)

    def requested_max_tokens(self) -> int | None:
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return super().requested_max_tokens()

    def top_probs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else super().top_probs()


Prompt = str | list[int] | list[str | int]


class CompletionRequest(SamplingFields):
    """``POST /completion`` (native) and ``POST /v1/completions`` (OpenAI) bodies."""

    prompt: Prompt | list[Prompt]
    echo: bool = False
    #: OpenAI's legacy completions: the number of alternatives per token (0 = only the chosen one's).
    logprobs: int | None = Field(default=None, ge=0, le=20)

    def top_probs(self) -> int | None:
        return self.logprobs if self.logprobs is not None else super().top_probs()


class TokenizeRequest(_Body):
    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(_Body):
    tokens: list[int]


class SlotFileRequest(_Body):
    """``POST /slots/{id}?action=save|restore``: a plain file name inside ``--slot-save-path``."""

    filename: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,200}$")


class ApplyTemplateRequest(_Body):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Tool] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    add_generation_prompt: bool = True


BodyT = TypeVar("BodyT", bound=BaseModel)


def parse_body(model: type[BodyT], raw: bytes) -> BodyT:
    """Validate a raw JSON body; the first problem becomes an :class:`InvalidRequest` naming the field."""
    try:
        return model.model_validate_json(raw or b"")
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        location = ".".join(str(part) for part in error["loc"])
        if error["type"] == "json_invalid":
            raise InvalidRequest(f"Invalid JSON body: {error['msg']}") from None
        if error["type"] == "missing":
            raise InvalidRequest(f"Missing required field '{location}'", param=location) from None
        if not location:
            raise InvalidRequest(f"Invalid request body: {error['msg']}") from None
        shown = error.get("input")
        raise InvalidRequest(
            f"Invalid value for '{location}': {error['msg']} (got {_short(shown)})", param=location
        ) from None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
