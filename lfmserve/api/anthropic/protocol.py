"""Anthropic's Messages request body (``/v1/messages``, ``/v1/messages/count_tokens``) and its adapter.

The body is adapted into the chat layer's neutral :class:`~lfmserve.chat.request.ChatRequest` the way
llama-server's ``server_chat_convert_anthropic_to_oai`` turns it into an OpenAI chat body, so both
servers render the same prompt: the system text becomes the first message; in each message, text and
image blocks stay the content, ``tool_use`` blocks become the assistant's ``tool_calls``, ``thinking``
blocks its ``reasoning_content``, and ``tool_result`` blocks become ``tool`` messages after it.

Unlike llama-server, ``tool_choice`` ``{"type": "tool", "name"}`` forces that tool (llama-server only asks
for some call) and ``{"type": "none"}`` hides the tools, as Anthropic documents both.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ...chat.request import ChatRequest, ContentPart, GenerationOptions, Message, NamedTool, ToolChoice
from ..body import Body, SamplingFields, TokenCount

#: llama-server's ``max_tokens`` when the body has none (Anthropic requires one; llama-server is permissive).
DEFAULT_MAX_TOKENS = 4096
#: llama-server's thinking budget for ``thinking: {"type": "enabled"}`` without ``budget_tokens``.
DEFAULT_THINKING_BUDGET = 10_000
#: Claude Code's system prompt starts with this line, whose ``cch=`` stamp changes on every request.
_BILLING_HEADER = "x-anthropic-billing-header:"


class TextBlock(Body):
    type: Literal["text"]
    text: str

    def to_part(self) -> ContentPart:
        return ContentPart("text", self.text)


class ImageSource(Body):
    type: Literal["base64", "url"]
    #: llama-server's default when a base64 source names no type.
    media_type: str = "image/jpeg"
    data: str = ""
    url: str = ""

    def uri(self) -> str:
        return f"data:{self.media_type};base64,{self.data}" if self.type == "base64" else self.url


class ImageBlock(Body):
    type: Literal["image"]
    source: ImageSource

    def to_part(self) -> ContentPart:
        return ContentPart("image", source=self.source.uri())


class ToolUseBlock(Body):
    """A call an earlier assistant turn made."""

    type: Literal["tool_use"]
    id: str = ""
    name: str = ""
    input: dict[str, Any] = Field(default_factory=dict)

    def to_call(self) -> dict[str, Any]:
        """OpenAI's shape; the arguments as llama-server writes them (compact JSON), so the prompts agree."""
        arguments = json.dumps(self.input, separators=(",", ":"), ensure_ascii=False)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": arguments}}


class ToolResultBlock(Body):
    type: Literal["tool_result"]
    tool_use_id: str = ""
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]] | None = None
    #: Accepted and, as in llama-server, not shown to the model.
    is_error: bool = False

    def to_message(self) -> Message:
        """A ``tool`` message: text alone collapses to one string (llama-server's choice), images keep parts."""
        content = self.content
        if isinstance(content, list):
            parts = tuple(block.to_part() for block in content)
            if all(part.type == "text" for part in parts):
                return Message(role="tool", content="".join(p.text for p in parts), tool_call_id=self.tool_use_id)
            return Message(role="tool", content=parts, tool_call_id=self.tool_use_id)
        return Message(role="tool", content=content or "", tool_call_id=self.tool_use_id)


class ThinkingBlock(Body):
    type: Literal["thinking"]
    thinking: str = ""
    signature: str | None = None


class RedactedThinkingBlock(Body):
    """Encrypted reasoning from Anthropic's own models: nothing a local model can read, so it is dropped."""

    type: Literal["redacted_thinking"]


ContentBlock = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]


class MessageParam(Body):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]

    def to_messages(self) -> list[Message]:
        """This message, then one ``tool`` message per result; a message left with nothing to say is dropped."""
        if isinstance(self.content, str):
            return [Message(role=self.role, content=self.content)]
        parts = tuple(b.to_part() for b in self.content if isinstance(b, TextBlock | ImageBlock))
        calls = tuple(b.to_call() for b in self.content if isinstance(b, ToolUseBlock))
        reasoning = "".join(b.thinking for b in self.content if isinstance(b, ThinkingBlock))
        results = [b.to_message() for b in self.content if isinstance(b, ToolResultBlock)]
        if not (parts or calls or reasoning):
            return results
        message = Message(role=self.role, content=parts or "", tool_calls=calls, reasoning_content=reasoning or None)
        return [message, *results]


class ToolDefinition(Body):
    name: str
    description: str = ""
    #: Absent for Anthropic's server tools (``web_search_…``); llama-server then declares no parameters.
    input_schema: dict[str, Any] = Field(default_factory=dict)

    def to_tool(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.input_schema},
        }


class ToolChoiceParam(Body):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False

    @model_validator(mode="after")
    def _name_for_tool(self) -> ToolChoiceParam:
        if self.type == "tool" and not self.name:
            raise ValueError("tool_choice of type 'tool' needs 'name'")
        return self

    def to_choice(self) -> ToolChoice:
        if self.type == "tool":
            assert self.name is not None  # checked above
            return NamedTool(self.name)
        return "required" if self.type == "any" else self.type


class ThinkingParam(Body):
    """Extended thinking: ``enabled`` turns the template's thinking on with a budget of ``budget_tokens``
    (llama-server's default, 10,000, when absent), ``disabled`` turns it off; any other ``type`` (``adaptive``...)
    leaves the template's default, so a newer one need not be refused."""

    type: str
    budget_tokens: TokenCount | None = None

    def switch(self) -> dict[str, Any]:
        if self.type in ("enabled", "disabled"):
            return {"enable_thinking": self.type == "enabled"}
        return {}

    def budget(self) -> int | None:
        if self.type != "enabled":
            return None
        return DEFAULT_THINKING_BUDGET if self.budget_tokens is None else self.budget_tokens


class Metadata(Body):
    """Accepted and, as in llama-server, without effect."""

    user_id: str | None = None


class MessagesRequest(SamplingFields):
    """The Messages body, plus llama-server's generation extras (``seed``, ``repeat_penalty``, …) by name."""

    messages: list[MessageParam]
    system: str | list[TextBlock] | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: ToolChoiceParam | None = None
    stop_sequences: list[str] | None = None
    thinking: ThinkingParam | None = None
    metadata: Metadata | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    def requested_max_tokens(self) -> int | None:
        requested = super().requested_max_tokens()
        return DEFAULT_MAX_TOKENS if requested is None else requested

    def generation_options(self) -> GenerationOptions:
        options = super().generation_options()
        if self.stop_sequences is None:
            return options
        return dataclasses.replace(options, stop=(*options.stop, *self.stop_sequences))

    def to_chat_request(self) -> ChatRequest:
        choice = self.tool_choice
        return ChatRequest(
            messages=(*self._system(), *(m for message in self.messages for m in message.to_messages())),
            tools=tuple(tool.to_tool() for tool in self.tools or ()),
            tool_choice=choice.to_choice() if choice else "auto",
            parallel_tool_calls=not (choice and choice.disable_parallel_tool_use),
            template_kwargs=(self.thinking.switch() if self.thinking else {}) | (self.chat_template_kwargs or {}),
            reasoning_budget=self.thinking.budget() if self.thinking else None,
            generation=self.generation_options(),
        )

    def _system(self) -> tuple[Message, ...]:
        """The system text as one message: a string, or its text blocks joined without a separator."""
        if self.system is None:
            return ()
        texts = [self.system] if isinstance(self.system, str) else [block.text for block in self.system]
        return (Message(role="system", content="".join(map(normalize_billing_header, texts))),)


def normalize_billing_header(text: str) -> str:
    """Claude Code's ``cch=xxxxx;`` stamp as ``cch=fffff;``, as llama-server rewrites it: the stamp changes on
    every request, so left as it is, no prompt cache could reach past the system prompt's first line."""
    if not text.startswith(_BILLING_HEADER):
        return text
    at = text.find("cch=", len(_BILLING_HEADER))
    if at < 0:
        return text
    stamp = at + len("cch=")
    if text[stamp + 5 : stamp + 6] != ";":
        return text
    return text[:stamp] + "fffff" + text[stamp + 5 :]
