"""Ollama's request bodies (``/api/chat``, ``/api/generate``, ``/api/embed``, ``/api/embeddings``, ``/api/show``,
``/api/pull``) and their adapters into the chat layer's neutral requests.

The mapping is Ollama's own onto llama-server (its ``llm/llama_server.go``): ``options`` become the sampling
fields of the same names (``num_predict`` is ``max_tokens``; ``-2``, "fill the context", is "until the end" here
as there), ``think`` becomes the template's ``enable_thinking`` (a level also its ``reasoning_effort``),
``format`` ``"json"`` an object schema and a schema itself the answer's schema. Each message's ``images`` are
base64 data; an ``[img]`` in the text marks where the next one goes, and the images without a marker go before
the text (Ollama's renderer). The bytes decide whether an item is an image or audio, as Ollama sniffs them.
Load-time options (``num_ctx``, ``num_gpu``, ``num_thread``, ...) are accepted and have no effect: the model is
loaded with the server's own flags. ``keep_alive`` is read here into seconds, so a server of one model and a router
accept and refuse the same values. Nothing here loads llama.cpp: the router parses its bodies with these models.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PlainValidator
from pydantic_core import PydanticCustomError

from ...chat.request import ChatRequest, ContentPart, GenerationOptions, Message
from ...errors import InvalidRequest
from ..body import INT32_MAX, Body, Finite, Penalty, Probability
from ..openai.protocol import Tool

#: Ollama's reasoning levels (``think: "high"``); any is also ``enable_thinking``.
THINK_LEVELS = ("low", "medium", "high", "max")
#: Where a message's text places its next image (Ollama's legacy placeholder).
IMAGE_MARKER = "[img]"


def _whole(value: Any) -> Any:
    """A float with no fractional part as an int (Home Assistant sends ``num_ctx: 8192.0``; Go reads it as 8192)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


#: An integer option, also written as a whole float.
WholeNumber = Annotated[int, BeforeValidator(_whole)]


class Options(Body):
    """Ollama's ``options``: the runtime ones change sampling; the load-time ones are accepted and ignored."""

    temperature: float | None = Field(default=None, ge=0.0)
    top_k: WholeNumber | None = Field(default=None, ge=-1, le=INT32_MAX)
    top_p: Probability | None = None
    min_p: Probability | None = None
    typical_p: Probability | None = None
    repeat_penalty: float | None = Field(default=None, ge=0.0)
    repeat_last_n: WholeNumber | None = Field(default=None, ge=-1, le=INT32_MAX)
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    seed: WholeNumber | None = None
    mirostat: Annotated[WholeNumber, Field(ge=0, le=2)] | None = None
    mirostat_tau: Finite | None = None
    mirostat_eta: Finite | None = None
    #: -1: until the end of the answer; -2 (Ollama's "fill the context") is the same here.
    num_predict: WholeNumber | None = Field(default=None, ge=-2)
    stop: list[str] | None = None
    num_ctx: WholeNumber | None = Field(default=None, ge=0)

    def sampling(self) -> dict[str, Any]:
        return self.model_dump(exclude={"num_predict", "stop", "num_ctx"}, exclude_none=True)

    def max_tokens(self) -> int | None:
        return None if self.num_predict is None else max(self.num_predict, -1)


class CalledFunction(Body):
    name: str
    #: An object, as Ollama sends it (not OpenAI's JSON text).
    arguments: dict[str, Any] = Field(default_factory=dict)
    index: int | None = None


class HistoryToolCall(Body):
    id: str | None = None
    function: CalledFunction

    def to_openai(self) -> dict[str, Any]:
        """OpenAI's shape; the arguments written as llama-server writes them (compact JSON), so prompts agree."""
        arguments = json.dumps(self.function.arguments, separators=(",", ":"), ensure_ascii=False)
        call = {"type": "function", "function": {"name": self.function.name, "arguments": arguments}}
        return call | ({"id": self.id} if self.id else {})


class ChatMessage(Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[HistoryToolCall] | None = None
    #: The tool a ``tool`` message answers (Ollama's name for it); ``tool_call_id`` is newer clients'.
    tool_name: str | None = None
    tool_call_id: str | None = None

    def to_message(self) -> Message:
        return Message(
            role=self.role,
            content=content_with_images(self.content, self.images or ()),
            name=self.tool_name,
            tool_calls=tuple(call.to_openai() for call in self.tool_calls or ()),
            tool_call_id=self.tool_call_id,
            reasoning_content=self.thinking or None,
        )


def content_with_images(text: str, images: list[str] | tuple[str, ...]) -> str | tuple[ContentPart, ...]:
    """The text, with each image where its ``[img]`` marker was, and the images without one before the text."""
    if not images:
        return text
    pieces = text.split(IMAGE_MARKER, len(images))
    placed = len(pieces) - 1
    leading = [_media_part(data) for data in images[placed:]]
    parts: list[ContentPart] = []
    for index, piece in enumerate(pieces):
        if piece:
            parts.append(ContentPart("text", piece))
        if index < placed:
            parts.append(_media_part(images[index]))
    return (*leading, *parts)


def _media_part(data: str) -> ContentPart:
    # Imported here: the bytes are sniffed by the chat layer's media module, which loads llama.cpp, and a router
    # parses Ollama's bodies without ever adapting them.
    from ...chat.media import media_type_of_base64

    return ContentPart(media_type_of_base64(data), source=data)


#: The longest duration Go's ``time.Duration`` holds (int64 nanoseconds, about 292 years): Ollama refuses a longer
#: duration string, and a number past it wraps round, so here both are a 400.
MAX_KEEP_ALIVE_S = (2**63 - 1) / 1e9
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_SECONDS = re.compile(_NUMBER)
_DURATION_PART = re.compile(rf"({_NUMBER})(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def keep_alive_seconds(value: object) -> float | None:
    """``keep_alive`` in seconds, read as Ollama reads it: a number of seconds or a Go duration (``"5m"``,
    ``"1h30m"``, ``"-1"``); negative is "for ever" (returned as -1), None "the server's default". Anything else is
    refused (a list, an object, a boolean, ``"inf"``, ``NaN``, more than Go's durations hold): a model kept for an
    unwritable time could never be listed by ``/api/ps``."""
    if value is None:
        return None
    seconds = _duration_seconds(value.strip()) if isinstance(value, str) else _number_seconds(value)
    if seconds is None or not math.isfinite(seconds) or seconds > MAX_KEEP_ALIVE_S:
        raise PydanticCustomError("keep_alive", "expected seconds or a duration such as '5m', up to 292 years")
    return -1.0 if seconds < 0 else abs(seconds)  # abs: "-0s" is 0


def _number_seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        value = max(min(value, 2**64), -(2**64))  # past Go's range either way, and a huge int has no float
    return float(value)


def _duration_seconds(text: str) -> float | None:
    """A Go duration (or, as Ollama also reads it, a bare number of seconds), signed; None if it is neither."""
    sign, digits = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.removeprefix("+"))
    if _SECONDS.fullmatch(digits):
        return sign * float(digits)
    parts = _DURATION_PART.findall(digits)
    if not digits or "".join(number + unit for number, unit in parts) != digits:
        return None
    return sign * sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


#: ``keep_alive`` as a body field: given as seconds or a duration, held as seconds (see :func:`keep_alive_seconds`).
KeepAlive = Annotated[float | None, PlainValidator(keep_alive_seconds, json_schema_input_type=int | float | str | None)]
Format = Literal["", "json"] | dict[str, Any]
Think = bool | str


class GenerationBody(Body):
    """What ``/api/chat`` and ``/api/generate`` share."""

    model: str = ""
    format: Format | None = None
    options: Options | None = None
    stream: bool = True
    keep_alive: KeepAlive = None
    think: Think | None = None
    logprobs: bool = False
    top_logprobs: int = Field(default=0, ge=0, le=20)

    def generation_options(self) -> GenerationOptions:
        options = self.options or Options()
        return GenerationOptions(
            sampling=options.sampling(),
            max_tokens=options.max_tokens(),
            stop=tuple(options.stop or ()),
            n_probs=(self.top_logprobs or 0) if self.logprobs else None,
        )

    def response_schema(self) -> dict[str, Any] | None:
        if self.format == "json":
            return {"type": "object"}
        return self.format or None

    def thinking(self) -> dict[str, Any]:
        """The template variables ``think`` sets: ``enable_thinking``, and a level's ``reasoning_effort``."""
        think = self.think
        if think is None:
            return {}
        if isinstance(think, bool):
            return {"enable_thinking": think}
        if think not in THINK_LEVELS:
            raise InvalidRequest(f"invalid think value: {think!r} (true, false, or one of {', '.join(THINK_LEVELS)})")
        return {"enable_thinking": True, "reasoning_effort": think}

    @property
    def wants_thinking(self) -> bool:
        return self.think is not None and self.think is not False


class ChatBody(GenerationBody):
    messages: list[ChatMessage] = Field(default_factory=list)
    tools: list[Tool] | None = None

    @property
    def lifecycle_only(self) -> bool:
        """No messages: the request only loads the model (or, on a router, with ``keep_alive: 0`` unloads it)."""
        return not self.messages

    def to_chat_request(self) -> ChatRequest:
        return ChatRequest(
            messages=tuple(message.to_message() for message in self.messages),
            tools=tuple(tool.model_dump(exclude_none=True) for tool in self.tools or ()),
            response_schema=self.response_schema(),
            reasoning_format="auto",
            template_kwargs=self.thinking(),
            generation=self.generation_options(),
        )


class GenerateBody(GenerationBody):
    prompt: str = ""
    suffix: str = ""
    system: str | None = None
    #: A Go template replacing the model's: refused unless empty (lfmserve renders the model's Jinja template).
    template: str = ""
    raw: bool = False
    images: list[str] | None = None
    #: The token history older Ollama versions returned: never handed out here, so accepted and not read.
    context: list[int] | None = None

    @property
    def lifecycle_only(self) -> bool:
        """No prompt and no images: the request only loads (or unloads) the model, as :class:`ChatBody`'s."""
        return not self.prompt and not self.images

    def to_chat_request(self) -> ChatRequest:
        """The prompt as one user turn (after ``system``), rendered with the model's template."""
        if self.template:
            raise InvalidRequest("a template in the request is not supported: the model's own template is used")
        system = (Message(role="system", content=self.system),) if self.system else ()
        user = Message(role="user", content=content_with_images(self.prompt, self.images or ()))
        return ChatRequest(
            messages=(*system, user),
            response_schema=self.response_schema(),
            reasoning_format="auto",
            template_kwargs=self.thinking(),
            generation=self.generation_options(),
            model_messages_after_system=True,  # Ollama's GenerateHandler: system, the model's messages, the prompt
        )

    def raw_options(self) -> GenerationOptions:
        """A raw prompt's options: the format is the native schema constraint (there is no chat plan)."""
        schema = self.response_schema()
        options = self.generation_options()
        return options if schema is None else GenerationOptions(**{**_fields(options), "json_schema": schema})


def _fields(options: GenerationOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in options.__dataclass_fields__}


class ImageInput(Body):
    """An ``/api/embed`` item that is an image (base64), as Frigate sends them."""

    image: str


class EmbedBody(Body):
    model: str = ""
    input: str | list[Annotated[str | ImageInput, Field(union_mode="left_to_right")]] = Field(default_factory=list)
    #: Inputs longer than the context are cut to it (Ollama's default); false refuses them.
    truncate: bool = True
    dimensions: int | None = Field(default=None, ge=1)
    options: Options | None = None
    keep_alive: KeepAlive = None

    def items(self) -> list[str | ImageInput]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class EmbeddingsBody(Body):
    """The legacy ``/api/embeddings``: one prompt, one vector, not normalised."""

    model: str = ""
    prompt: str = ""
    options: Options | None = None
    keep_alive: KeepAlive = None


class NamedBody(Body):
    """``/api/show`` and ``/api/pull``: a model by ``model`` (or the older ``name``)."""

    model: str = ""
    name: str = ""
    verbose: bool = False
    stream: bool = True
    insecure: bool = False

    @property
    def model_name(self) -> str:
        return self.model or self.name
