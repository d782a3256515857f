"""OpenAI's ``/v1/audio/transcriptions`` (and ``/audio/transcriptions``), through the chat path, as llama-server.

The multipart form (``file``, ``prompt``, ``language``, ``response_format``, ``stream``, ``max_tokens``,
``temperature``) becomes a chat: the model's ASR prompt (LFM2 templates: system ``Perform ASR.`` and an
empty user text; others: ``Transcribe audio to text``), `` (language: xx)`` appended, then the audio.
The answer is llama-server's ``transcript.text.done`` object (``transcript.text.delta`` events when
streamed); lfmserve also answers OpenAI's ``text`` and ``verbose_json`` formats.
"""

from __future__ import annotations

import base64
import math
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.datastructures import UploadFile

from ..chat.output import AssistantOutputParser
from ..chat.request import ChatRequest, ContentPart, GenerationOptions, Message
from ..chat.serving import Serving
from ..engine.records import EngineOutput
from ..errors import InvalidRequest, NotSupported
from .offload import Offload
from .sse import sse, until_disconnect
from .state import app_state, serving

router = APIRouter()

FORMATS = ("json", "text", "verbose_json")
#: llama.cpp's test for an LFM2 chat template (``is_lfm2_template``), which picks LFM2's ASR prompt.
_LFM2_MARKS = ("<|tool_list_start|>", "<|tool_list_end|>")


@router.post("/v1/audio/transcriptions")
@router.post("/audio/transcriptions")
async def transcriptions(request: Request) -> Response:
    served = serving(request)
    if not served.media.modalities["audio"]:
        raise NotSupported("The current model does not support audio input.")
    async with request.form() as form:  # closes the spooled upload
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidRequest("No input file found for transcription", param="file")
        audio = base64.b64encode(await upload.read()).decode()
        fields = {key: value for key, value in form.items() if isinstance(value, str)}
    response_format = fields.get("response_format", "json")
    if response_format not in FORMATS:
        raise InvalidRequest(
            f"response_format must be one of {', '.join(FORMATS)} (got {response_format[:40]!r})",
            param="response_format",
        )
    chat = transcription_chat(served, audio, fields)
    try:
        media = await served.read_media(chat)
    except InvalidRequest as exc:  # the form's file, not a chat part
        raise InvalidRequest(exc.message, param="file") from None
    if media[0].kind != "audio":
        raise InvalidRequest("the file is not audio (an image can be described through chat)", param="file")
    engine_request, parser = await Offload(large=True)(served.prepare_chat, chat, media)  # mtmd resamples
    if fields.get("stream", "false") == "true":
        return sse(
            _events(parser, served.start(engine_request)),
            done_marker=True,
            ping_s=app_state(request).settings.server.sse_ping_interval,
        )
    done = await until_disconnect(request, served.run(engine_request))
    text = parser.parse(done.text).content
    if response_format == "text":
        return PlainTextResponse(text)
    body: dict[str, Any] = {"type": "transcript.text.done", "text": text, "usage": _usage(done.last)}
    if response_format == "verbose_json":
        seconds = media[0].data.size / served.projector.sample_rate if served.projector else 0.0
        body = {"task": "transcribe", "language": fields.get("language", ""), "duration": seconds, **body}
    return JSONResponse(body)


def transcription_chat(served: Serving, audio: str, fields: dict[str, str]) -> ChatRequest:
    """The chat llama-server turns a transcription form into."""
    lfm2 = all(mark in served.template.source for mark in _LFM2_MARKS)
    system, user = ("Perform ASR.", "") if lfm2 else ("", "Transcribe audio to text")
    prompt = fields.get("prompt") or user
    if fields.get("language"):
        prompt += f" (language: {fields['language']})"
    messages = [Message(role="system", content=system)] if system else []
    messages.append(Message(role="user", content=(ContentPart("text", prompt), ContentPart("audio", source=audio))))
    return ChatRequest(messages=tuple(messages), generation=_generation(fields))


def _generation(fields: dict[str, str]) -> GenerationOptions:
    """The form's ``temperature`` and ``max_tokens`` (form fields are text) as the chat layer takes them."""
    temperature = _number(fields, "temperature", float, low=0.0)
    max_tokens = _number(fields, "max_tokens", int, low=-1)
    sampling = {} if temperature is None else {"temperature": temperature}
    return GenerationOptions(sampling=sampling, max_tokens=None if max_tokens is None else int(max_tokens))


def _number(fields: dict[str, str], name: str, kind: type[int] | type[float], *, low: float) -> float | None:
    if name not in fields:
        return None
    try:
        value = kind(fields[name])
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= low):
        raise InvalidRequest(f"Invalid value for '{name}': {fields[name][:40]!r}", param=name)
    return value


def _usage(out: EngineOutput) -> dict[str, Any]:
    return {
        "type": "tokens",
        "input_tokens": out.n_prompt_tokens,
        "output_tokens": out.n_decoded,
        "total_tokens": out.n_prompt_tokens + out.n_decoded,
        "input_tokens_details": {"cached_tokens": out.n_cached_tokens},
    }


async def _events(parser: AssistantOutputParser, outputs: AsyncIterator[EngineOutput]) -> AsyncIterator[dict[str, Any]]:
    text = ""
    async for out in outputs:
        for delta in parser.feed(out.text) + (parser.finish() if out.finished else []):
            if delta.content:
                text += delta.content
                yield {"type": "transcript.text.delta", "delta": delta.content}
        if out.finished:
            yield {"type": "transcript.text.done", "text": text, "usage": _usage(out)}
