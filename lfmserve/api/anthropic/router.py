"""Anthropic's routes: each handler parses a Messages body, adapts it for the chat layer, and answers JSON or
SSE; errors keep llama-server's ``{"error": {...}}`` body, as llama-server's own Anthropic routes do."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...chat.output import AssistantOutputParser
from ...chat.serving import Serving
from ...engine.records import EngineRequest
from ..chat_route import prepared_chat
from ..offload import read_body
from ..openapi import request_body
from ..sse import sse, until_disconnect
from ..state import app_state
from . import responses
from .protocol import MessagesRequest

router = APIRouter()


@router.post("/v1/messages", openapi_extra=request_body(MessagesRequest))
async def messages(request: Request) -> Response:
    body, served, engine_request, parser = await _prepare(request)
    if body.stream:
        events = responses.message_events(served, parser, served.start(engine_request))
        return sse(
            events, done_marker=False, named_events=True, ping_s=app_state(request).settings.server.sse_ping_interval
        )
    done = await until_disconnect(request, served.run(engine_request))
    return JSONResponse(responses.message(served, done, parser))


@router.post("/v1/messages/count_tokens", openapi_extra=request_body(MessagesRequest))
async def count_tokens(request: Request) -> dict[str, Any]:
    """The positions the prompt of the same body sent to ``/v1/messages`` takes, media included."""
    _, _, engine_request, _ = await _prepare(request)
    return {"input_tokens": len(engine_request.prompt_tokens)}


async def _prepare(request: Request) -> tuple[MessagesRequest, Serving, EngineRequest, AssistantOutputParser]:
    """The body, and the engine request and output parser its chat makes (media read off the loop)."""
    body, offload = await read_body(request, MessagesRequest)
    return body, *await prepared_chat(request, body.to_chat_request(), offload)
