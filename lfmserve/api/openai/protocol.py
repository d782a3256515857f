"""OpenAI's request bodies (chat completions, text completions) with llama-server's extras, and their adapters.

Each body validates its wire shape (see :mod:`lfmserve.api.body`) and turns itself into the chat
layer's neutral :class:`~lfmserve.chat.request.ChatRequest` once, in ``to_chat_request``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from ...chat.request import (
    ChatRequest,
    ContentPart,
    Continuation,
    Message,
    NamedTool,
    ReasoningEffort,
    ReasoningFormat,
    ToolChoice,
)
from ...engine.records import ReasoningControl
from ..body import Body, SamplingFields, TokenCount


class TextPart(Body):
    type: Literal["text"]
    text: str

    def to_part(self) -> ContentPart:
        return ContentPart("text", self.text)


class ImageUrl(Body):
    url: str
    #: OpenAI's ``detail`` (low / high / auto): accepted, and, as in llama-server, without effect.
    detail: str | None = None


class ImageUrlPart(Body):
    type: Literal["image_url"]
    image_url: ImageUrl

    def to_part(self) -> ContentPart:
        return ContentPart("image", source=self.image_url.url)


class InputAudio(Body):
    """OpenAI's ``{data, format}`` (base64); llama-server also reads a ``url``. The format is not needed: the
    bytes say what they are."""

    data: str | None = None
    url: str | None = None
    format: str | None = None


class InputAudioPart(Body):
    type: Literal["input_audio"]
    input_audio: InputAudio

    def to_part(self) -> ContentPart:
        return ContentPart("audio", source=self.input_audio.data or self.input_audio.url or "")


class InputVideo(Body):
    """A video part's object: llama-server reads ``data``, else ``url`` (any form an image URL takes)."""

    data: str | None = None
    url: str | None = None


class VideoPart(Body):
    """llama-server's ``input_video`` part, and ``video_url``, its OpenAI-style alias: each reads the object under
    its own type's key."""

    type: Literal["input_video", "video_url"]
    input_video: InputVideo | None = None
    video_url: InputVideo | None = None

    def to_part(self) -> ContentPart:
        video = self.input_video if self.type == "input_video" else self.video_url
        source = "" if video is None else video.data if video.data is not None else video.url or ""
        return ContentPart("video", source=source)


MediaPart = ImageUrlPart | InputAudioPart | VideoPart


class ToolFunction(Body):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    model_config = ConfigDict(strict=True, extra="allow")


class Tool(Body):
    type: Literal["function"] = "function"
    function: ToolFunction


class CalledFunction(Body):
    name: str
    #: OpenAI sends a JSON text; a mapping is taken too (templates read one).
    arguments: str | dict[str, Any] = "{}"
    model_config = ConfigDict(strict=True, extra="allow")


class HistoryToolCall(Body):
    """A call an earlier assistant turn made, as OpenAI's clients send it back."""

    id: str | None = None
    type: Literal["function"] = "function"
    function: CalledFunction
    model_config = ConfigDict(strict=True, extra="allow")


class ChatMessage(Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[Annotated[TextPart | MediaPart, Field(discriminator="type")]] | None = None
    name: str | None = None
    tool_calls: list[HistoryToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    @model_validator(mode="after")
    def _content_required(self) -> ChatMessage:
        if self.content is None and self.role != "assistant":
            raise ValueError(f"'{self.role}' messages need 'content'")
        return self

    def to_message(self) -> Message:
        content = self.content
        return Message(
            role="system" if self.role == "developer" else self.role,
            content=content if not isinstance(content, list) else tuple(p.to_part() for p in content),
            name=self.name,
            tool_calls=tuple(call.model_dump(exclude_none=True) for call in self.tool_calls or ()),
            tool_call_id=self.tool_call_id,
            reasoning_content=self.reasoning_content,
        )


class NamedFunction(Body):
    name: str


class NamedToolChoice(Body):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(Body):
    name: str | None = None
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(Body):
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


class ReasoningParam(Body):
    """``reasoning`` as OpenRouter and others send it: an ``effort``, a switch, a budget of thinking tokens."""

    effort: ReasoningEffort | None = None
    enabled: bool | None = None
    max_tokens: int | None = Field(default=None, ge=-1)
    #: Accepted: the thinking is answered apart from the content anyway (``reasoning_content``).
    exclude: bool = False


class ChatPrompt(Body):
    """The fields that decide a chat prompt: chat completions have them, and so has ``/apply-template``."""

    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Tool] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: ReasoningEffort | None = None
    reasoning: ReasoningParam | None = None
    add_generation_prompt: bool = True
    #: vLLM's (and transformers') explicit prefill: ``true``, or which part of the message to continue.
    continue_final_message: bool | Literal["content", "reasoning_content"] | None = None

    def prompt_fields(self) -> dict[str, Any]:
        """These fields under :class:`~lfmserve.chat.request.ChatRequest`'s names."""
        return {
            "messages": tuple(m.to_message() for m in self.messages),
            "tools": tuple(tool.model_dump(exclude_none=True) for tool in self.tools or ()),
            "reasoning_effort": self.reasoning_effort or (self.reasoning.effort if self.reasoning else None),
            "template_kwargs": self._switch() | (self.chat_template_kwargs or {}),
            "add_generation_prompt": self.add_generation_prompt,
            "continue_final_message": self._continuation(),
        }

    def _switch(self) -> dict[str, Any]:
        """``reasoning.enabled`` as the template's ``enable_thinking`` (``chat_template_kwargs`` say last)."""
        enabled = self.reasoning.enabled if self.reasoning else None
        return {} if enabled is None else {"enable_thinking": enabled}

    def _continuation(self) -> Continuation:
        value = self.continue_final_message
        if value is True:
            return "auto"
        if value == "content":
            return "content"
        return "reasoning" if value == "reasoning_content" else "none"


class ChatCompletionRequest(ChatPrompt, SamplingFields):
    max_completion_tokens: TokenCount | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    reasoning_format: ReasoningFormat | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    #: Answers to generate, at most one per slot (the serving layer checks the slot count).
    n: int = Field(default=1, ge=1)
    #: Add llama-server's ``__verbose`` (the prompt and the native result); None: the server's ``--verbose``.
    verbose: bool | None = None
    #: llama-server's reasoning budget (both names), and the message written when it ends the thinking.
    reasoning_budget_tokens: int | None = Field(default=None, ge=-1)
    thinking_budget_tokens: int | None = Field(default=None, ge=-1)
    reasoning_budget_message: str | None = None
    #: Arm the completion for ``POST /v1/chat/completions/control`` (llama-server's field).
    reasoning_control: bool = False

    def requested_max_tokens(self) -> int | None:
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return super().requested_max_tokens()

    def top_probs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else super().top_probs()

    def to_chat_request(self) -> ChatRequest:
        return ChatRequest(
            **self.prompt_fields(),
            tool_choice=self._tool_choice(),
            parallel_tool_calls=self.parallel_tool_calls,
            response_schema=self.response_format.output_schema() if self.response_format else None,
            reasoning_format=self.reasoning_format,
            reasoning_budget=self._budget(),
            reasoning_budget_message=self.reasoning_budget_message,
            reasoning_control=ReasoningControl() if self.reasoning_control else None,
            generation=self.generation_options(),
        )

    def _budget(self) -> int | None:
        """The first budget given (llama-server's names, then ``reasoning.max_tokens``); -1 is the server's."""
        asked = self.reasoning.max_tokens if self.reasoning else None
        given = (self.reasoning_budget_tokens, self.thinking_budget_tokens, asked)
        budget = next((value for value in given if value is not None), None)
        return None if budget == -1 else budget

    def _tool_choice(self) -> ToolChoice:
        choice = self.tool_choice
        if isinstance(choice, NamedToolChoice):
            return NamedTool(choice.function.name)
        return choice or "auto"


class ControlRequest(Body):
    """llama-server's ``POST /v1/chat/completions/control``: an action on the running completion ``id`` (``model``
    is the router's, to find the model's server)."""

    id: str = ""
    action: str = ""
    model: str | None = None


class ApplyTemplateRequest(ChatPrompt):
    """llama-server's ``POST /apply-template``: the prompt a chat body renders to."""

    def to_chat_request(self) -> ChatRequest:
        return ChatRequest(**self.prompt_fields())
