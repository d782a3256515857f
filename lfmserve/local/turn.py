"""One in-process chat turn's inputs and outputs: Python arguments in, as the chat layer's records; the output
parser's deltas out, as the :mod:`lfmserve.results` records the HTTP client returns too.

:class:`lfmserve.Chat` is an API family like the HTTP ones (see :mod:`lfmserve.chat`): it adapts what it is
given once, here, and the chat layer does the rest exactly as it does for a request body. What it is given:
the history as OpenAI-shaped dicts, OpenAI tool definitions and ``tool_choice``, sampling knobs under
:class:`~lfmserve.engine.records.SamplingParams`' names, and media as bytes, file paths or PIL images.
Media are decoded by the server's reader (:class:`~lfmserve.chat.media.MediaReader`), so bad bytes are the
same :class:`~lfmserve.errors.InvalidRequest` a server answers with a 400.

Example::

    options = generation_options({"temperature": 0.2, "max_tokens": 64}, id_slot=0)
    reply = Reply(parse_as=None)
    events = [reply.event(delta) for delta in parser.feed(text) + parser.finish()]
    result = reply.result(last_output)
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from ..chat.media import MediaReader
from ..chat.output import AssistantMessage, OutputDelta, finish_reason
from ..chat.request import ContentPart, GenerationOptions, MediaType, Message, NamedTool, Role, ToolChoice
from ..engine.records import SAMPLING_NAMES, EngineOutput
from ..errors import InvalidRequest
from ..llama.mtmd import Media
from ..results import ChatResult, ContentDelta, ReasoningDelta, Timings, ToolCall, ToolCallDelta, Usage, parse_content
from ..sampler_order import canonical_sampling

if TYPE_CHECKING:
    from PIL import Image

#: A picture: encoded bytes in any format the server reads, a path to such a file, or a PIL image.
ImageInput = Union[bytes, str, "os.PathLike[str]", "Image.Image"]
#: A recording: WAV, FLAC, MP3 or Ogg bytes, or a path to such a file.
AudioInput = Union[bytes, str, "os.PathLike[str]"]
#: A media item to read: its kind, what the app gave, and the argument it came in (``images.0``).
MediaItem = tuple[MediaType, ImageInput, str]

#: What a turn takes besides the sampling knobs.
_TURN_OPTIONS = frozenset({"max_tokens", "stop"})
_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
_CHOICES: dict[str, ToolChoice] = {"auto": "auto", "none": "none", "required": "required"}


def generation_options(sampling: Mapping[str, Any], *, id_slot: int) -> GenerationOptions:
    """A turn's ``temperature=…, max_tokens=…, stop=…, logit_bias=…`` as the chat layer takes them; a name that
    is not one of them is a TypeError, as an unknown keyword argument is."""
    unknown = set(sampling) - SAMPLING_NAMES - _TURN_OPTIONS
    if unknown:
        raise TypeError(f"unknown sampling options: {', '.join(sorted(unknown))}")
    bias = sampling.get("logit_bias") or ()
    stop = sampling.get("stop") or ()
    try:
        knobs = canonical_sampling({k: v for k, v in sampling.items() if k in SAMPLING_NAMES - {"logit_bias"}})
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="samplers") from None
    return GenerationOptions(
        sampling=knobs,
        logit_bias=tuple(bias.items()) if isinstance(bias, Mapping) else tuple(tuple(entry) for entry in bias),
        max_tokens=sampling.get("max_tokens"),
        stop=(stop,) if isinstance(stop, str) else tuple(stop),
        id_slot=id_slot,
    )


# -- the history ----------------------------------------------------------------------------------
def history_messages(messages: Sequence[Mapping[str, Any]]) -> tuple[Message, ...]:
    """OpenAI-shaped message dicts as the chat layer's records (``developer`` is a system message, as on the
    server); a malformed one is an InvalidRequest naming it."""
    return tuple(_message(message, f"messages.{i}") for i, message in enumerate(messages))


def _message(message: Mapping[str, Any], param: str) -> Message:
    role = _ROLES.get(str(message.get("role")))
    if role is None:
        raise InvalidRequest(f"{param}.role is {message.get('role')!r}, not one of {', '.join(_ROLES)}", param=param)
    content = message.get("content")
    if isinstance(content, list | tuple):
        content = tuple(_part(part, f"{param}.content.{j}") for j, part in enumerate(content))
    elif content is None and role != "assistant":
        raise InvalidRequest(f"'{role}' messages need 'content'", param=f"{param}.content")
    elif content is not None and not isinstance(content, str):
        raise InvalidRequest(f"{param}.content is text or a list of parts", param=f"{param}.content")
    return Message(
        role=role,
        content=content,
        name=message.get("name"),
        tool_calls=tuple(message.get("tool_calls") or ()),
        tool_call_id=message.get("tool_call_id"),
        reasoning_content=message.get("reasoning_content"),
    )


def _part(part: Mapping[str, Any], param: str) -> ContentPart:
    kind = part.get("type")
    if kind == "text":
        return ContentPart("text", str(part.get("text", "")))
    if kind == "image_url":
        return ContentPart("image", source=str((part.get("image_url") or {}).get("url", "")))
    if kind == "input_audio":
        audio = part.get("input_audio") or {}
        return ContentPart("audio", source=str(audio.get("url") or audio.get("data") or ""))
    raise InvalidRequest(f"{param} has type {kind!r}, not text, image_url or input_audio", param=param)


def media_part(kind: MediaType, placeholder: str) -> dict[str, Any]:
    """The OpenAI content part that stands for a media item in :attr:`lfmserve.Chat.messages`."""
    if kind == "audio":
        return {"type": "input_audio", "input_audio": {"url": placeholder}}
    return {"type": "image_url", "image_url": {"url": placeholder}}


# -- tools ----------------------------------------------------------------------------------------
def tool_list(tools: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """OpenAI function tools as the template receives them (``type`` added, None fields left out)."""
    out = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if (
            not isinstance(function, Mapping)
            or not isinstance(function.get("name"), str)
            or tool.get("type", "function") != "function"
        ):
            raise InvalidRequest(
                f"tools.{i} is not an OpenAI function tool ({{'type': 'function', 'function': {{'name': ...}}}})",
                param=f"tools.{i}",
            )
        out.append({"type": "function", "function": {k: v for k, v in function.items() if v is not None}})
    return tuple(out)


def tool_choice(value: str | Mapping[str, Any] | None) -> ToolChoice:
    """``auto`` (None), ``none``, ``required``, or OpenAI's ``{"type": "function", "function": {"name": ...}}``."""
    if value is None:
        return "auto"
    if isinstance(value, str) and value in _CHOICES:
        return _CHOICES[value]
    function = value.get("function") if isinstance(value, Mapping) else None
    if isinstance(function, Mapping) and isinstance(function.get("name"), str):
        return NamedTool(function["name"])
    raise InvalidRequest(
        f"tool_choice is 'auto', 'none', 'required' or {{'type': 'function', 'function': {{'name': ...}}}} "
        f"(got {value!r})",
        param="tool_choice",
    )


# -- media ----------------------------------------------------------------------------------------
def media_items(images: Sequence[ImageInput], audio: Sequence[AudioInput]) -> list[MediaItem]:
    """The items of ``images=`` and ``audio=``, each named by its argument and place."""
    for name, items in (("images", images), ("audio", audio)):
        if isinstance(items, str | bytes | os.PathLike) or _is_pil_image(items):
            raise TypeError(f"{name} is a list of items, not one item")
    return [("image", item, f"images.{i}") for i, item in enumerate(images)] + [
        ("audio", item, f"audio.{i}") for i, item in enumerate(audio)
    ]


def read_media(reader: MediaReader, items: Sequence[MediaItem]) -> list[Media]:
    """Decoded media, through the server's reader: every type checked first (a model without a projector
    refuses them all), then each item's bytes decoded by what they are."""
    reader.check_types([(kind, "", param) for kind, _, param in items])
    return [reader.decode(kind, media_bytes(item, param), param) for kind, item, param in items]


def media_bytes(item: ImageInput, param: str) -> bytes:
    """An item's encoded bytes: as given, read from its path, or a PIL image written as PNG (lossless)."""
    if isinstance(item, bytes):
        return item
    if isinstance(item, str | os.PathLike):
        try:
            return Path(item).read_bytes()
        except OSError as exc:
            raise InvalidRequest(f"cannot read {param} from {str(item)[:200]!r}: {exc.strerror}", param=param) from exc
    if _is_pil_image(item):
        buffer = io.BytesIO()
        item.convert("RGB").save(buffer, format="PNG")  # the reader takes RGB, as it does from any file
        return buffer.getvalue()
    raise TypeError(f"{param} is bytes, a path or a PIL image, not {type(item).__name__}")


def _is_pil_image(item: object) -> bool:
    """Whether ``item`` is a PIL image, asked without importing Pillow (an app that made one has imported it): a
    text model's chats never load it."""
    module = sys.modules.get("PIL.Image")
    return module is not None and isinstance(item, module.Image)


# -- the reply ------------------------------------------------------------------------------------
class Reply:
    """The reply as it is parsed: each delta becomes the event that reports it, and the whole a ChatResult."""

    def __init__(self, parse_as: Any = None) -> None:
        self._message = AssistantMessage()
        self._parse_as = parse_as

    def event(self, delta: OutputDelta) -> ContentDelta | ReasoningDelta | ToolCallDelta:
        self._message.add(delta)
        if delta.call is not None:
            call = delta.call
            return ToolCallDelta(call.index, call.id, call.name, call.arguments)
        if delta.reasoning:
            return ReasoningDelta(delta.reasoning)
        return ContentDelta(delta.content)

    def message(self) -> dict[str, Any]:
        """The reply so far as the history keeps it (an OpenAI assistant message)."""
        return self._assembled("stop").message()

    def result(self, last: EngineOutput) -> ChatResult:
        """The whole reply, with the finished output's counts; its content parsed when a class was asked for."""
        reason = finish_reason(last.finish_reason or "stop", bool(self._message.calls))
        return self._assembled(reason, last)

    def _assembled(self, reason: str, last: EngineOutput | None = None) -> ChatResult:
        message = self._message
        calls = tuple(ToolCall(call.id, call.name, json.loads(call.arguments)) for call in message.calls)
        return ChatResult(
            content=message.content,
            reasoning=message.reasoning or None,
            tool_calls=calls,
            finish_reason=reason,
            usage=_usage(last) if last is not None else None,
            timings=_timings(last) if last is not None else None,
            parsed=parse_content(self._parse_as, message.content, reason) if last is not None else None,
        )


def _usage(out: EngineOutput) -> Usage:
    return Usage(prompt_tokens=out.n_prompt_tokens, completion_tokens=out.n_decoded, cached_tokens=out.n_cached_tokens)


def _timings(out: EngineOutput) -> Timings:
    """The engine's timings under the same names (the record the HTTP client reads from ``timings``)."""
    return Timings(**{f.name: getattr(out.timings, f.name) for f in dataclasses.fields(Timings)})


@dataclass(frozen=True, slots=True)
class TurnStats:
    """What one turn cost: the prompt, what the cache already had, what was prefilled and generated."""

    n_prompt_tokens: int
    n_cached_tokens: int
    n_prefilled: int
    n_generated: int
    n_closing_tokens: int
    finish_reason: str | None
