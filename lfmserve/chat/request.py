"""The neutral request records the chat layer takes, whatever API family the body arrived in.

An API family validates its own wire body and adapts it here once: names are the chat layer's, values
already checked for type and range. What is left to check needs the model (a token id, a grammar,
a template) and is checked by the chat layer, as a 400 naming the wire field.

Example::

    ChatRequest(
        messages=(Message(role="user", content="Hi"),),
        generation=GenerationOptions(sampling={"temperature": 0.1}, max_tokens=64),
    )
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..engine.records import ReasoningControl

Role = Literal["system", "user", "assistant", "tool"]
#: Where ``<think>`` text goes: ``none`` leaves it in the content (llama-server's names).
ReasoningFormat = Literal["auto", "deepseek", "deepseek-legacy", "none"]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high"]
#: ``continue_final_message``: the last (assistant) message is continued rather than closed; ``auto`` continues
#: its reasoning when it has reasoning and no content, else its content (llama-server's rule).
Continuation = Literal["none", "auto", "content", "reasoning"]


MediaType = Literal["image", "audio", "video"]


@dataclass(frozen=True, slots=True)
class ContentPart:
    """A piece of a message's content: text, or a media item (image, audio or video)."""

    type: Literal["text"] | MediaType
    text: str = ""
    #: Where a media item's bytes are: a ``data:`` URI, raw base64, an ``http(s)://`` or ``file://`` URL.
    source: str = ""


@dataclass(frozen=True, slots=True)
class MediaPrompt:
    """A completion prompt with media (llama-server's ``{"prompt_string", "multimodal_data"}``): the text holds
    one media marker per item of ``sources`` (base64 data, or any form a content part's ``source`` takes)."""

    text: str
    sources: tuple[str, ...]


#: A completion prompt: text, token ids, a mix of both (text pieces are tokenized in place), or text with media.
Prompt = str | Sequence[int | str] | MediaPrompt


@dataclass(frozen=True, slots=True)
class ContentPrompt:
    """An embedding input given as chat-style content parts (llama-server joins the text parts without a
    separator and applies no chat template)."""

    parts: tuple[ContentPart, ...]


@dataclass(frozen=True, slots=True)
class EmbeddingOptions:
    """What an embedding request asks beyond its inputs: ``embd_normalize`` (None: the server's) and
    OpenAI's ``dimensions`` (None: the model's width)."""

    normalize: int | None = None
    dimensions: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    role: Role
    #: A string, typed parts, or None (an assistant message that only calls tools).
    content: str | tuple[ContentPart, ...] | None = None
    name: str | None = None
    #: OpenAI-shaped calls of an earlier assistant turn (``function.arguments`` as JSON text or a mapping).
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    @property
    def media_parts(self) -> tuple[ContentPart, ...]:
        if not isinstance(self.content, tuple):
            return ()
        return tuple(part for part in self.content if part.type != "text")


@dataclass(frozen=True, slots=True)
class NamedTool:
    """``tool_choice`` naming the one function the answer must call."""

    name: str


ToolChoice = Literal["none", "auto", "required"] | NamedTool


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerationOptions:
    """How to continue a prompt, as the request asked; None (or empty) means the server's default."""

    #: Sampling knobs the request set, under :data:`~lfmserve.engine.records.SAMPLING_NAMES` (not ``logit_bias``).
    sampling: Mapping[str, Any] = field(default_factory=dict)
    #: ``(token id or text, bias or False)`` entries as sent (the chat layer checks they are pairs); text is
    #: tokenized, ``False`` bans the token.
    logit_bias: tuple[tuple[Any, ...], ...] = ()
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    #: None: the server's default (``--cache-prompt``).
    cache_prompt: bool | None = None
    id_slot: int = -1
    #: llama-server's native constraints (at most one): a JSON schema, or a GBNF grammar.
    json_schema: dict[str, Any] | bool | None = None
    grammar: str | None = None
    #: Alternatives to report per token; None = no probabilities at all, 0 = only the chosen token's.
    n_probs: int | None = None
    #: Report the probabilities after the sampler chain (llama-server's ``post_sampling_probs``).
    post_sampling_probs: bool = False
    #: Most tokens drafted per step (speculative decoding); None = the server's, 0 = none for this request.
    draft_max: int | None = None
    #: LoRA adapters as ``(id, scale)`` pairs, the others at 0; None or empty = the server's scales.
    lora: tuple[tuple[int, float], ...] | None = None
    #: What a context shift keeps of the prompt (None: ``--keep``) and drops after it (0: half).
    n_keep: int | None = None
    n_discard: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatRequest:
    messages: tuple[Message, ...]
    #: OpenAI-shaped tools (``{"type": "function", "function": {...}}``), as the template receives them.
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool = True
    #: The schema the whole answer must follow (``response_format``), or None for free text.
    response_schema: dict[str, Any] | bool | None = None
    #: None: the server's ``--reasoning-format``.
    reasoning_format: ReasoningFormat | None = None
    reasoning_effort: ReasoningEffort | None = None
    #: Thinking tokens allowed before the end of thinking is written by force (-1: no limit; None: the server's
    #: ``--reasoning-budget``), and the message written before it (None: ``--reasoning-budget-message``).
    reasoning_budget: int | None = None
    reasoning_budget_message: str | None = None
    #: Ends the thinking when asked (``reasoning_control``), budget or not; None: only a budget ends it.
    reasoning_control: ReasoningControl | None = None
    #: Extra template variables (``chat_template_kwargs``).
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    add_generation_prompt: bool = True
    #: "none" still continues a final assistant message (a prefill), as llama-server does by default.
    continue_final_message: Continuation = "none"
    generation: GenerationOptions = field(default_factory=GenerationOptions)
    #: Ollama's ``/api/generate``: the model's own messages (``--chat-messages-file``) go after the request's
    #: system message rather than before it (:mod:`.preamble`).
    model_messages_after_system: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class InfillRequest:
    """``/infill``: the code before and after the gap (text, or token ids and text), other files as
    ``(filename, text)``, and the start of the middle already written (``prompt``)."""

    prefix: str | Sequence[int | str]
    suffix: str | Sequence[int | str]
    extra: tuple[tuple[str, str], ...] = ()
    prompt: str = ""
