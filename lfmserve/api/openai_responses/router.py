"""OpenAI's Responses routes (llama-server's ``/v1/responses``, ``/responses`` and their ``/input_tokens``): the
body becomes a neutral chat request and runs through the same Serving path as chat completions."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...chat.output import AssistantOutputParser
from ...engine.records import EngineRequest
from ..chat_route import prepared_chat
from ..offload import read_body
from ..openapi import request_body
from ..sse import sse, until_disconnect
from ..state import app_state, serving
from . import responses
from .protocol import ResponsesRequest

router = APIRouter()


async def _prepared(request: Request) -> tuple[ResponsesRequest, EngineRequest, AssistantOutputParser]:
    """The body, its engine request and the parser for its output (media read, prompt rendered and tokenized)."""
    body, offload = await read_body(request, ResponsesRequest)
    _, engine_request, parser = await prepared_chat(request, body.to_chat_request(), offload)
    return body, engine_request, parser


@router.post("/v1/responses", openapi_extra=request_body(ResponsesRequest))
@router.post("/responses", openapi_extra=request_body(ResponsesRequest))
async def create_response(request: Request) -> Response:
    body, engine_request, parser = await _prepared(request)
    served = serving(request)
    if body.stream:
        events = responses.response_events(served, body, parser, served.start(engine_request))
        return sse(
            events,
            done_marker=False,
            named_events=True,
            error_as_data=True,
            ping_s=app_state(request).settings.server.sse_ping_interval,
        )
    done = await until_disconnect(request, served.run(engine_request))
    return JSONResponse(responses.whole_response(served, parser, done))


@router.post("/v1/responses/input_tokens", openapi_extra=request_body(ResponsesRequest))
@router.post("/responses/input_tokens", openapi_extra=request_body(ResponsesRequest))
async def input_tokens(request: Request) -> dict[str, Any]:
    """How many positions the request's prompt takes, media included, without running it."""
    _, engine_request, _ = await _prepared(request)
    return {"object": "response.input_tokens", "input_tokens": len(engine_request.prompt_tokens)}
