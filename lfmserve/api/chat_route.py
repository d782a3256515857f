"""What every chat-family route (OpenAI chat, Anthropic Messages, OpenAI Responses) does once its body is parsed
and adapted: the chat's media read, and its prompt rendered and tokenized (off the event loop when the body is
large or has media)."""

from __future__ import annotations

from fastapi import Request

from ..chat.output import AssistantOutputParser
from ..chat.request import ChatRequest
from ..chat.serving import Serving
from ..engine.records import EngineRequest
from .offload import Offload
from .state import serving


async def prepared_chat(
    request: Request, chat: ChatRequest, offload: Offload
) -> tuple[Serving, EngineRequest, AssistantOutputParser]:
    """The serving model, and the engine request and output parser of ``chat``."""
    served = serving(request)
    media = await served.read_media(chat)
    engine_request, parser = await offload.also_if(bool(media))(served.prepare_chat, chat, media)
    return served, engine_request, parser
