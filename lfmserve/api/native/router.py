"""llama-server's own routes: each handler parses its body, calls the chat layer, and answers JSON or SSE."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...chat.infill import check_infill, prepare_infill
from ...chat.serving import Serving
from ...engine.records import EngineRequest
from ...errors import NotSupported
from ..offload import Offload, read_body
from ..openapi import request_body
from ..sse import sse, until_disconnect
from ..state import app_state, serving
from . import responses
from .protocol import CompletionRequest, DetokenizeRequest, InfillBody, TokenizeRequest

router = APIRouter()


@router.get("/health")
@router.get("/v1/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/props")
async def props(request: Request) -> dict[str, Any]:
    state = app_state(request)
    return responses.props(serving(request), is_sleeping=state.sleeping, ui_settings=state.ui_settings)


@router.post("/props")
async def change_props(request: Request) -> dict[str, bool]:
    """llama-server's route for changing server properties with ``--props``; it changes none yet, nor does this."""
    if not app_state(request).settings.server.props:
        raise NotSupported("This server does not support changing global properties. Start it with `--props`")
    return {"success": True}


@router.post("/completion", openapi_extra=request_body(CompletionRequest))
@router.post("/completions", openapi_extra=request_body(CompletionRequest))
async def completion(request: Request) -> Response:
    body, offload = await read_body(request, CompletionRequest)
    served = serving(request)
    engine_requests = await prepare_completion(served, body, offload)
    if body.stream:
        streamed = replace(engine_requests[0], return_progress=body.return_progress)
        chunks = responses.completion_chunks(served, body, streamed, served.start(streamed))
        return sse(chunks, done_marker=False, ping_s=app_state(request).settings.server.sse_ping_interval)
    results = await until_disconnect(request, served.run_all(engine_requests))
    out = [
        responses.completion_result(served, body, engine_request, done, done.last, index=i)
        for i, (engine_request, done) in enumerate(zip(engine_requests, results, strict=True))
    ]
    return JSONResponse(out[0] if len(out) == 1 else out)


@router.post("/infill", openapi_extra=request_body(InfillBody))
async def infill(request: Request) -> Response:
    """llama-server's fill-in-the-middle: a completion of the FIM prompt around the request's code."""
    body, offload = await read_body(request, InfillBody)
    served = serving(request)
    check_infill(served.model)
    engine_request = await offload(prepare_infill, served, body.to_infill(), body.generation_options())
    if body.stream:
        chunks = responses.completion_chunks(served, body, engine_request, served.start(engine_request))
        return sse(chunks, done_marker=False, ping_s=app_state(request).settings.server.sse_ping_interval)
    done = await until_disconnect(request, served.run(engine_request))
    return JSONResponse(responses.completion_result(served, body, engine_request, done, done.last))


async def prepare_completion(served: Serving, body: CompletionRequest, offload: Offload) -> list[EngineRequest]:
    """The engine requests of a completion body (both families' completion routes), media read first."""
    prompts = body.prompts()
    media = await served.read_prompt_media(prompts)
    return await offload.also_if(any(media))(
        served.prepare_completion, prompts, body.generation_options(), stream=body.stream, media=media
    )


@router.post("/tokenize", openapi_extra=request_body(TokenizeRequest))
async def tokenize(request: Request) -> dict[str, Any]:
    body, offload = await read_body(request, TokenizeRequest)
    served = serving(request)
    ids = await offload(
        served.model.tokenize, body.content, add_special=body.add_special, parse_special=body.parse_special
    )
    return await offload(responses.tokens, served, ids, with_pieces=body.with_pieces)


@router.post("/detokenize", openapi_extra=request_body(DetokenizeRequest))
async def detokenize(request: Request) -> dict[str, Any]:
    body, offload = await read_body(request, DetokenizeRequest)
    return {"content": await offload(serving(request).detokenize, body.tokens)}
