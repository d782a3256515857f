"""OpenAI's routes: each handler parses its body, adapts it for the chat layer, and answers JSON or SSE.

llama-server's ``/apply-template`` is here too: it reads an OpenAI chat body and answers the prompt it renders to.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...errors import InvalidRequest
from ..chat_route import prepared_chat
from ..native.protocol import CompletionRequest
from ..native.router import prepare_completion
from ..offload import read_body
from ..openapi import request_body
from ..sse import sse, until_disconnect
from ..state import app_state, serving
from . import responses
from .protocol import ApplyTemplateRequest, ChatCompletionRequest, ControlRequest

router = APIRouter()


@router.get("/v1/models")
@router.get("/models")
async def models(request: Request) -> dict[str, Any]:
    settings = app_state(request).settings
    return responses.model_list(serving(request), settings.source.aliases, settings.source.tag_list)


@router.post("/v1/chat/completions", openapi_extra=request_body(ChatCompletionRequest))
@router.post("/chat/completions", openapi_extra=request_body(ChatCompletionRequest))
async def chat_completions(request: Request) -> Response:
    body, offload = await read_body(request, ChatCompletionRequest)
    served = serving(request)
    chat = body.to_chat_request()
    media = await served.read_media(chat)
    prepared = await offload.also_if(bool(media))(
        served.prepare_choices, chat, media, n=body.n, return_progress=body.stream and body.return_progress
    )
    # Live under its id while it is answered, for the control route; armed if its generation has the control.
    ids, live = responses.StreamIds(), app_state(request).completions
    budget = prepared[0][0].thinking_budget
    control = budget.control if budget is not None else None
    if body.stream:
        if len(prepared) > 1:
            chunks = responses.choices_chunks(served, body, prepared, served.start, ids)
        else:
            engine_request, parser = prepared[0]
            chunks = responses.chat_chunks(served, body, parser, served.start(engine_request), ids)
        return sse(
            live.during(ids.cid, control, chunks),
            done_marker=True,
            ping_s=app_state(request).settings.server.sse_ping_interval,
        )
    with live.live(ids.cid, control):
        results = await until_disconnect(request, served.run_all([engine_request for engine_request, _ in prepared]))
    return JSONResponse(responses.chat_completion(served, body, prepared, results, ids.cid))


@router.post("/v1/chat/completions/control", openapi_extra=request_body(ControlRequest))
async def chat_control(request: Request) -> dict[str, Any]:
    """llama-server's control of a running chat completion: ``reasoning_end`` ends its thinking at the next step."""
    body, _ = await read_body(request, ControlRequest)
    if not body.id:
        raise InvalidRequest("missing completion id")
    if body.action != "reasoning_end":
        raise InvalidRequest("unknown control action")
    return app_state(request).completions.end_reasoning(body.id)


@router.post("/v1/chat/completions/input_tokens", openapi_extra=request_body(ChatCompletionRequest))
@router.post("/chat/completions/input_tokens", openapi_extra=request_body(ChatCompletionRequest))
async def chat_input_tokens(request: Request) -> dict[str, Any]:
    """How many positions a chat's prompt takes, media included, without running it (llama-server's route)."""
    body, offload = await read_body(request, ChatCompletionRequest)
    _, engine_request, _ = await prepared_chat(request, body.to_chat_request(), offload)
    return {"object": "response.input_tokens", "input_tokens": len(engine_request.prompt_tokens)}


@router.post("/v1/completions", openapi_extra=request_body(CompletionRequest))
async def completions(request: Request) -> Response:
    body, offload = await read_body(request, CompletionRequest)
    served = serving(request)
    engine_requests = await prepare_completion(served, body, offload)
    if body.stream:
        outputs = served.start(engine_requests[0])
        return sse(
            responses.text_completion_chunks(served, body, outputs),
            done_marker=True,
            ping_s=app_state(request).settings.server.sse_ping_interval,
        )
    results = await until_disconnect(request, served.run_all(engine_requests))
    return JSONResponse(responses.text_completion(served, body, results))


@router.post("/apply-template", openapi_extra=request_body(ApplyTemplateRequest))
async def apply_template(request: Request) -> dict[str, Any]:
    body, offload = await read_body(request, ApplyTemplateRequest)
    return {"prompt": await offload(serving(request).render_chat, body.to_chat_request())}
