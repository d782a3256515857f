"""OpenAI's Responses request body (``POST /v1/responses``) and its adapter into the neutral chat request.

llama-server answers the Responses API by converting the body into a chat-completions body
(``server_chat_convert_responses_to_chatcmpl``); this does the same conversion, straight into
:class:`~lfmserve.chat.request.ChatRequest`, so both APIs share one chat path:

- ``instructions`` becomes a leading system message, a string ``input`` one user message;
- input items: messages (``input_text`` / ``input_image`` parts, or ``output_text`` / ``refusal`` for the
  assistant), ``function_call`` (an assistant tool call), ``function_call_output`` (a tool message) and
  ``reasoning`` (an assistant's ``reasoning_content``); an assistant item that follows an assistant message
  joins it, as llama-server merges them, so a turn sent back as reasoning + message + calls is one message;
- function tools in the Responses flat shape become chat tools (``strict`` true unless given); hosted tools
  (``web_search`` ...) have no chat equivalent and are skipped with a warning; ``max_output_tokens`` is
  ``max_tokens`` and ``reasoning.effort`` is ``reasoning_effort``;
- ``text.format`` is ``response_format`` (llama-server's Responses ignores it; OpenAI's constrains the answer).
  llama-server's ``response_format`` extra, when given too, wins.

Every other generation field (``temperature``, ``top_p``, llama-server's extras) reads as in chat completions.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag, model_validator

from ...chat.request import ChatRequest, ContentPart, Message, NamedTool, ReasoningEffort, ReasoningFormat, ToolChoice
from ...errors import InvalidRequest
from ..body import Body, SamplingFields, TokenCount
from ..openai.protocol import ResponseFormat

logger = logging.getLogger(__name__)


# -- content parts ---------------------------------------------------------------------------------
class InputTextPart(Body):
    type: Literal["input_text"]
    text: str

    def to_part(self) -> ContentPart:
        return ContentPart("text", self.text)


class InputImagePart(Body):
    type: Literal["input_image"]
    #: A URL or ``data:`` URI, as a plain string (the Responses shape, not chat's ``{"url": ...}``).
    image_url: str
    #: Accepted, and, as in llama-server, without effect.
    detail: str | None = None

    def to_part(self) -> ContentPart:
        return ContentPart("image", source=self.image_url)


class InputFilePart(Body):
    """Parsed so that it gets llama-server's refusal rather than an "unknown part" one."""

    type: Literal["input_file"]
    model_config = ConfigDict(strict=True, extra="allow")

    def to_part(self) -> ContentPart:
        raise InvalidRequest("'input_file' is not supported by llamacpp at this moment", param="input")


class OutputTextPart(Body):
    """An earlier answer's text; ``input_text`` is taken too (llama-server accepts both in assistant items)."""

    type: Literal["output_text", "input_text"]
    text: str

    def to_part(self) -> ContentPart:
        return ContentPart("text", self.text)


class RefusalPart(Body):
    type: Literal["refusal"]
    refusal: str

    def to_part(self) -> ContentPart:
        return ContentPart("text", self.refusal)  # the chat layer has no refusal part: the template sees text


InputPart = Annotated[InputTextPart | InputImagePart | InputFilePart, Field(discriminator="type")]
ToolOutputPart = Annotated[InputTextPart | InputImagePart, Field(discriminator="type")]
AssistantPart = Annotated[OutputTextPart | RefusalPart, Field(discriminator="type")]


def _content(content: str | list[Any]) -> str | tuple[ContentPart, ...]:
    return content if isinstance(content, str) else tuple(part.to_part() for part in content)


# -- input items -----------------------------------------------------------------------------------
class InputMessage(Body):
    type: Literal["message"] | None = None
    role: Literal["user", "system", "developer"]
    content: str | list[InputPart]

    def to_message(self) -> Message:
        return Message(role="user" if self.role == "user" else "system", content=_content(self.content))


class OutputMessage(Body):
    """An earlier assistant answer. llama-server also wants ``type: "message"``; OpenAI's easy form omits it."""

    type: Literal["message"] | None = None
    role: Literal["assistant"]
    content: str | list[AssistantPart]

    def to_message(self) -> Message:
        return Message(role="assistant", content=_content(self.content))


class FunctionCallItem(Body):
    type: Literal["function_call"]
    call_id: str
    name: str
    #: JSON text, as the model wrote it.
    arguments: str

    def to_message(self) -> Message:
        call = {"id": self.call_id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return Message(role="assistant", tool_calls=(call,))


class FunctionCallOutputItem(Body):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[ToolOutputPart]

    def to_message(self) -> Message:
        return Message(role="tool", content=_content(self.output), tool_call_id=self.call_id)


class ReasoningText(Body):
    text: str
    type: str | None = None


class ReasoningItem(Body):
    """An earlier turn's reasoning; as in llama-server its first ``content`` entry is the text (``summary`` unread)."""

    type: Literal["reasoning"]
    summary: list[Any]
    content: list[ReasoningText] = Field(min_length=1)

    def to_message(self) -> Message:
        return Message(role="assistant", reasoning_content=self.content[0].text)


def _item_kind(item: Any) -> str | None:
    """Which item this is, told the way llama-server tells it: by ``role`` for messages, else by ``type``."""
    if not isinstance(item, dict):
        return None
    role = item.get("role")
    if role in ("user", "system", "developer"):
        return "input_message"
    if role == "assistant":
        return "output_message"
    kind = item.get("type")
    return kind if kind in ("function_call", "function_call_output", "reasoning") else None


InputItem = Annotated[
    Annotated[InputMessage, Tag("input_message")]
    | Annotated[OutputMessage, Tag("output_message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(_item_kind, custom_error_type="invalid_item", custom_error_message="Cannot determine type of 'item'"),
]


Content = str | tuple[ContentPart, ...] | None


def _joined(first: Content, then: Content) -> Content:
    """Two messages' contents as one (text becomes a part beside the other's parts)."""
    if first is None or then is None:
        return then if first is None else first
    as_parts = [(ContentPart("text", c),) if isinstance(c, str) else c for c in (first, then)]
    return as_parts[0] + as_parts[1]


def append_message(messages: list[Message], message: Message) -> None:
    """Add ``message``; an assistant one right after an assistant message joins it (llama-server's merge)."""
    previous = messages[-1] if messages else None
    if message.role != "assistant" or previous is None or previous.role != "assistant":
        messages.append(message)
        return
    messages[-1] = replace(
        previous,
        content=_joined(previous.content, message.content),
        tool_calls=previous.tool_calls + message.tool_calls,
        reasoning_content=message.reasoning_content or previous.reasoning_content,
    )


# -- tools -----------------------------------------------------------------------------------------
class FunctionTool(Body):
    """A function tool in the Responses flat shape (``name`` beside ``type``, not under ``function``)."""

    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    model_config = ConfigDict(strict=True, extra="allow")

    def to_chat_tool(self) -> dict[str, Any]:
        function = self.model_dump(exclude={"type"}, exclude_none=True)
        function.setdefault("strict", True)  # llama-server's default, so templates see the same tool
        return {"type": "function", "function": function}


class HostedTool(Body):
    """A tool OpenAI runs itself (``web_search``, ``file_search`` ...)."""

    type: str | None = None


ResponsesTool = Annotated[
    Annotated[FunctionTool, Tag("function")] | Annotated[HostedTool, Tag("hosted")],
    Discriminator(lambda tool: "function" if isinstance(tool, dict) and tool.get("type") == "function" else "hosted"),
]


class FunctionChoice(Body):
    """``tool_choice`` naming a function, in the Responses flat shape."""

    type: Literal["function"]
    name: str


class ReasoningOptions(Body):
    effort: ReasoningEffort | None = None


class TextFormat(Body):
    """``text.format``: the Responses spelling of ``response_format``, a ``json_schema``'s schema beside ``type``."""

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema_present(self) -> TextFormat:
        if self.type == "json_schema" and self.schema_ is None:
            raise ValueError("type 'json_schema' needs a schema")
        return self

    def output_schema(self) -> dict[str, Any] | bool | None:
        """The schema the output must follow, or None for free text (``json_object``: any object)."""
        if self.type == "text":
            return None
        return self.schema_ if self.schema_ is not None else {"type": "object"}


class TextOptions(Body):
    format: TextFormat | None = None


# -- the body --------------------------------------------------------------------------------------
class ResponsesRequest(SamplingFields):
    """``POST /v1/responses``.

    Example::

        body = parse_body(ResponsesRequest, b'{"input": "Hi", "max_output_tokens": 8}')
        chat = body.to_chat_request()  # one user message, max_tokens 8
    """

    input: str | list[InputItem]
    instructions: str | None = None
    tools: list[ResponsesTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | FunctionChoice | None = None
    parallel_tool_calls: bool = True
    max_output_tokens: TokenCount | None = None
    reasoning: ReasoningOptions | None = None
    previous_response_id: str | None = None
    #: llama-server's extras, read as its chat completions read them.
    reasoning_format: ReasoningFormat | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    response_format: ResponseFormat | None = None
    text: TextOptions | None = None

    def requested_max_tokens(self) -> int | None:
        if self.max_output_tokens is not None:
            return self.max_output_tokens
        return super().requested_max_tokens()

    def to_chat_request(self) -> ChatRequest:
        if self.previous_response_id:  # nothing is stored, so there is no earlier response to continue
            raise InvalidRequest("llama.cpp does not support 'previous_response_id'.", param="previous_response_id")
        return ChatRequest(
            messages=self.chat_messages(),
            tools=self._chat_tools(),
            tool_choice=self._tool_choice(),
            parallel_tool_calls=self.parallel_tool_calls,
            response_schema=self._output_schema(),
            reasoning_format=self.reasoning_format,
            reasoning_effort=self.reasoning.effort if self.reasoning else None,
            template_kwargs=self.chat_template_kwargs or {},
            generation=self.generation_options(),
        )

    def chat_messages(self) -> tuple[Message, ...]:
        messages: list[Message] = []
        if self.instructions is not None:
            messages.append(Message(role="system", content=self.instructions))
        if isinstance(self.input, str):
            messages.append(Message(role="user", content=self.input))
        for item in self.input if isinstance(self.input, list) else ():
            append_message(messages, item.to_message())
        if not messages:
            raise InvalidRequest("'input' must not be empty", param="input")
        return tuple(messages)

    def _chat_tools(self) -> tuple[dict[str, Any], ...]:
        tools = []
        for tool in self.tools or ():
            if isinstance(tool, FunctionTool):
                tools.append(tool.to_chat_tool())
            else:
                logger.warning("unsupported Responses tool type '%s' skipped", tool.type)
        return tuple(tools)

    def _output_schema(self) -> dict[str, Any] | bool | None:
        chosen = self.response_format or (self.text.format if self.text else None)
        return chosen.output_schema() if chosen else None

    def _tool_choice(self) -> ToolChoice:
        choice = self.tool_choice
        if isinstance(choice, FunctionChoice):
            return NamedTool(choice.name)
        return choice or "auto"
