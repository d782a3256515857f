"""A chat request as the template renders it: messages in the shape templates read, tools, template variables.

Assistant tool calls in the history reach the template with their arguments as mappings, as llama-server
gives them. A template that lists the tools but ignores ``tool_calls`` (the LFM2 and LFM2.5-1.2B ones) gets
them written into the assistant's content in the model's own markup, exactly as it generated them, so the
prompt cache reuses the whole earlier turn; a template without tools (plain ChatML, Gemma's) drops them, as in
llama-server, so a model never reads call markup its template does not teach it. A past ``reasoning_content``
is also passed as ``thinking``, the name LFM2.5-8B-A1B's template reads.

A final assistant message is continued, not closed (a prefill, unless ``--no-prefill-assistant``, or
``continue_final_message``), as llama-server's ``common_chat_templates_apply`` does: the earlier messages,
the generation prompt (what ``add_generation_prompt`` adds to them), then the message's reasoning in the
template's think tags and its content, so the model goes on from its last character.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Literal

from ..errors import InvalidRequest
from .plan import ChatPlan, template_kwargs
from .request import ChatRequest, ContentPart, Message
from .template import ChatFormatter, TemplateCaps, ThinkTags
from .tool_calls import format_calls


def render_chat(
    template: ChatFormatter,
    request: ChatRequest,
    plan: ChatPlan | None = None,
    *,
    media_marker: str = "",
    prefill: bool = True,
) -> str:
    """The prompt text; ``plan`` decides which tools and variables the template sees (all, without one).

    Each media part becomes ``media_marker`` in its message's text, which the projector replaces by the media.
    ``prefill``: see :func:`continuation`.
    """
    messages, tools, extra = _template_inputs(template, request, plan, media_marker)
    mode = continuation(request, prefill=prefill)
    if mode == "none":
        return template.render(messages, tools=tools, add_generation_prompt=request.add_generation_prompt, extra=extra)
    history = messages[:-1]
    closed = template.render(history, tools=tools, add_generation_prompt=False, extra=extra)
    opened = template.render(history, tools=tools, add_generation_prompt=True, extra=extra)
    generation_prompt = opened[len(os.path.commonprefix([closed, opened])) :]
    return closed + _continued(template.think_tags, generation_prompt, request.messages[-1], mode)


def render_history(template: ChatFormatter, request: ChatRequest, *, media_marker: str = "") -> str:
    """The messages with every turn closed: no generation prompt, and a final assistant message ended rather
    than continued. What a conversation's prompt cache holds between turns (the in-process :class:`~lfmserve.Chat`
    prefills it after each reply, so the next turn's prompt starts with exactly these tokens)."""
    messages, tools, extra = _template_inputs(template, request, None, media_marker)
    return template.render(messages, tools=tools, add_generation_prompt=False, extra=extra)


def _template_inputs(
    template: ChatFormatter, request: ChatRequest, plan: ChatPlan | None, media_marker: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, dict[str, Any]]:
    """The messages, tools and variables the template gets; ``plan`` decides the tools and variables (all, without
    one)."""
    if plan is None:
        tools = [dict(tool) for tool in request.tools] or None
        extra = template_kwargs(request)
    else:
        tools, extra = plan.tools, plan.template_kwargs
    return [template_message(template, m, media_marker) for m in request.messages], tools, extra


def continuation(request: ChatRequest, *, prefill: bool = True) -> Literal["none", "content", "reasoning"]:
    """What of the last message the prompt continues; llama-server's conflicts are 400s here. ``prefill``
    (``--prefill-assistant``): a final assistant message is continued unasked; without it, it is closed like
    any other, and the chat's 2-assistant check is skipped too, as in llama-server."""
    messages, mode = request.messages, request.continue_final_message
    last = messages[-1] if messages else None  # Anthropic's route takes an empty chat
    if mode == "none":
        if not prefill or last is None or last.role != "assistant":
            return "none"
        if len(messages) >= 2 and messages[-2].role == "assistant":
            raise InvalidRequest("Cannot have 2 or more assistant messages at the end of the list.", param="messages")
        mode = "auto"  # a prefill: add_generation_prompt is ignored
    elif request.add_generation_prompt:
        raise InvalidRequest(
            "Cannot set both add_generation_prompt and continue_final_message to true.", param="continue_final_message"
        )
    elif last is None or last.role != "assistant":
        raise InvalidRequest(
            "continue_final_message needs the last message to be an assistant message", param="continue_final_message"
        )
    if last.tool_calls:
        raise InvalidRequest("Cannot continue an assistant message that contains tool calls.", param="messages")
    if mode == "auto":
        return "reasoning" if last.reasoning_content and not last.content else "content"
    return mode


def _continued(
    tags: ThinkTags | None, generation_prompt: str, message: Message, mode: Literal["content", "reasoning"]
) -> str:
    """The open assistant turn: the generation prompt (its think tag replaced by the message's reasoning, closed
    when the content is continued), then the content, its text parts joined by blank lines (llama.cpp's
    ``render_content``)."""
    text = generation_prompt
    if tags is not None:
        at = text.find(tags.start)
        text = (text if at < 0 else text[:at]) + tags.start + (message.reasoning_content or "")
        if mode == "content":
            text += tags.end
    if mode != "content":
        return text
    content = message.content
    if isinstance(content, tuple):
        content = "\n\n".join(part.text for part in content if part.type == "text")
    return text + (content or "")


def template_message(template: ChatFormatter, message: Message, media_marker: str = "") -> dict[str, Any]:
    """One message as templates read it (HF transformers' conventions)."""
    content: Any = message.content
    if message.media_parts:
        content = text_with_markers(content, media_marker)
    elif isinstance(content, tuple):
        content = template.normalize_content([{"type": "text", "text": part.text} for part in content])
    out: dict[str, Any] = {"role": message.role, "content": content if content is not None else ""}
    for key in ("name", "tool_call_id", "reasoning_content"):
        if getattr(message, key) is not None:
            out[key] = getattr(message, key)
    if message.reasoning_content is not None:
        out["thinking"] = message.reasoning_content  # the name LFM2.5-8B-A1B's template reads
    if message.tool_calls:
        calls = [_tool_call_for_template(call) for call in message.tool_calls]
        out["tool_calls"] = calls
        if _writes_calls_as_text(template.caps):
            out["content"] = _with_text(out["content"], format_calls(calls))
    return out


def _writes_calls_as_text(caps: TemplateCaps) -> bool:
    """Whether earlier calls go into the assistant's text: only for a template that shows the model its tools
    but drops ``tool_calls`` (LFM2's: its model was trained on the calls in the content). A template that knows
    no tools gets them only as ``tool_calls`` and drops them, as in llama-server."""
    return caps.supports_tools and not caps.supports_tool_calls


def text_with_markers(parts: tuple[ContentPart, ...], media_marker: str) -> str:
    """A message with media as one text, as llama-server writes it: the text parts joined by newlines, each
    media part as the marker, with no newline next to a marker."""
    text = ""
    after_marker = False
    for part in parts:
        if part.type == "text":
            text += ("\n" if text and not after_marker else "") + part.text
            after_marker = False
        else:
            text += media_marker
            after_marker = True
    return text


def _with_text(content: Any, text: str) -> Any:
    """Content (a string or typed parts) with ``text`` appended."""
    if isinstance(content, list):
        return [*content, {"type": "text", "text": text}]
    return (content or "") + text


def _tool_call_for_template(call: Mapping[str, Any]) -> dict[str, Any]:
    """Templates read ``function.arguments`` as a mapping; OpenAI sends it as a JSON string."""
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            function["arguments"] = arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise InvalidRequest(f"tool call arguments are not valid JSON: {exc}", param="messages") from exc
    if not isinstance(arguments, dict):
        raise InvalidRequest(f"tool call arguments must be a JSON object (got {arguments!r})", param="messages")
    return {**call, "function": function}
