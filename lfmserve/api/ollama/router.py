"""Ollama's routes on a server of one model: the probes (``/``, ``/api/version``), the listings (``/api/tags``,
``/api/ps``, ``/api/show``), generation (``/api/chat``, ``/api/generate``), embeddings (``/api/embed``,
``/api/embeddings``), ``/api/pull`` of the served model, and a JSON refusal for the other management routes.

One model is loaded for the server's life, so ``keep_alive`` changes nothing here, and an empty request that
asks to unload it is answered as a load (``done_reason: "load"``): the model stays, and the answer says so. A
router (:mod:`lfmserve.router.ollama`) gives ``keep_alive`` its meaning. Generation accepts any model name, as
llama-server's own routes do; ``/api/show`` and ``/api/pull`` answer 404 for a name the server does not have.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...chat.embeddings import check_dimensions, shaped
from ...chat.media import media_type_of_base64
from ...chat.output import AssistantOutputParser
from ...chat.request import ContentPart, ContentPrompt, EmbeddingOptions
from ...chat.serving import Serving
from ...engine.embeddings import EmbeddingRequest
from ...engine.records import EngineRequest
from ...errors import InvalidRequest, NotFound, NotSupported
from ..chat_route import prepared_chat
from ..ndjson import ndjson
from ..offload import Offload, read_body
from ..openai.responses import input_modalities
from ..openapi import request_body
from ..sse import until_disconnect
from ..state import app_state, serving
from . import cards, responses
from .lifecycle import lifecycle_answer, management_refusal, probe_answer, pull_success
from .protocol import ChatBody, EmbedBody, EmbeddingsBody, GenerateBody, GenerationBody, ImageInput, NamedBody

router = APIRouter()


@router.get("/")
@router.head("/", include_in_schema=False)
async def probe(request: Request) -> Response:
    return probe_answer(request.headers.get("accept", ""))


@router.get("/api/version")
@router.head("/api/version", include_in_schema=False)
async def version() -> dict[str, str]:
    return {"version": cards.OLLAMA_VERSION}


@router.get("/api/tags")
async def tags(request: Request) -> dict[str, Any]:
    return {"models": [cards.tags_entry(_card_of(request))]}


@router.get("/api/ps")
async def ps(request: Request) -> dict[str, Any]:
    return {"models": [cards.ps_entry(_card_of(request), now=time.time(), keep_s=-1)]}


@router.post("/api/show", openapi_extra=request_body(NamedBody))
async def show(request: Request) -> dict[str, Any]:
    body, _ = await read_body(request, NamedBody)
    return cards.show(_named_card(request, body.model_name))


@router.post("/api/pull", openapi_extra=request_body(NamedBody))
async def pull(request: Request) -> Response:
    """Pulling the served model succeeds at once (Home Assistant pulls any name it does not find verbatim)."""
    body, _ = await read_body(request, NamedBody)
    _named_card(request, body.model_name)
    return pull_success(stream=body.stream)


def _card_of(request: Request) -> cards.ModelCard:
    """The served model's card (its context is the one a request may use: a slot's)."""
    served = serving(request)
    info = served.model.info
    template = served.template
    projector_path = served.projector.path if served.projector is not None else None
    modalities = input_modalities(served)
    size, modified = cards.files_size_and_time([info.path, *([projector_path] if projector_path else [])])
    return cards.ModelCard(
        name=cards.ollama_name(served.model_name),
        size=size,
        modified=modified,
        architecture=info.architecture,
        basename=info.basename or info.name,
        parameter_count=info.n_params,
        size_label=info.size_label,
        file_type=int(served.model.meta("general.file_type") or -1),
        context_length=served.engine.n_ctx_slot,
        embedding_length=info.n_embd,
        template=template.source,
        capabilities=cards.capabilities(
            tools=template.caps.supports_tools,
            thinking=cards.thinks(template),
            vision="image" in modalities,
            audio="audio" in modalities,
            embedding=served.embeddings.pooling is not None,
        ),
    )


def _named_card(request: Request, name: str) -> cards.ModelCard:
    card = _card_of(request)
    settings = app_state(request).settings.source
    if not name:
        raise InvalidRequest("model is required", param="model")
    if not cards.matches(name, (card.name, serving(request).model_name, *settings.aliases)):
        raise NotFound(f"model '{name}' not found")
    return card


# -- generation ---------------------------------------------------------------------------------------
@router.post("/api/chat", openapi_extra=request_body(ChatBody))
async def chat(request: Request) -> Response:
    body, offload = await read_body(request, ChatBody)
    served, reply = _start(request, body)
    if body.lifecycle_only:
        return JSONResponse(lifecycle_answer(body.model, "load", chat=True))
    served, engine_request, parser = await prepared_chat(request, body.to_chat_request(), offload)
    if body.stream:
        return ndjson(responses.chat_lines(reply, parser, served.start(engine_request)))
    done = await until_disconnect(request, served.run(engine_request))
    return JSONResponse(responses.chat_whole(reply, parser, done))


@router.post("/api/generate", openapi_extra=request_body(GenerateBody))
async def generate(request: Request) -> Response:
    body, offload = await read_body(request, GenerateBody)
    served, reply = _start(request, body)
    if body.lifecycle_only:
        return JSONResponse(lifecycle_answer(body.model, "load", chat=False))
    if body.suffix:
        raise InvalidRequest(f'"{body.model}" does not support insert', param="suffix")
    if body.raw:
        engine_request = (await _raw(served, body, offload))[0]
        parser = AssistantOutputParser(split_reasoning=False, parse_tool_calls=False)
    else:
        served, engine_request, parser = await prepared_chat(request, body.to_chat_request(), offload)
    if body.stream:
        return ndjson(responses.generate_lines(reply, parser, served.start(engine_request)))
    done = await until_disconnect(request, served.run(engine_request))
    return JSONResponse(responses.generate_whole(reply, parser, done))


async def _raw(served: Serving, body: GenerateBody, offload: Offload) -> list[EngineRequest]:
    """A raw prompt is sent as it is, without the template (its images before it)."""
    if body.images:
        raise InvalidRequest("images are not supported with raw prompts", param="images")
    return await offload(served.prepare_completion, [body.prompt], body.raw_options(), stream=body.stream)


def _start(request: Request, body: GenerationBody) -> tuple[Serving, responses.Reply]:
    """The serving model and the reply in the making, once the request's name and ``think`` are checked (its
    ``keep_alive`` was checked with the body, though one model stays loaded whatever it says)."""
    if not body.model:
        raise InvalidRequest("model is required", param="model")
    served = serving(request)
    if body.wants_thinking and not cards.thinks(served.template):
        raise InvalidRequest(f'"{body.model}" does not support thinking', param="think")
    reply = responses.Reply(body.model)
    if body.logprobs:
        reply.logprobs = responses.logprobs_shaper(served.piece, served.shown_steps, body.top_logprobs)
    return served, reply


# -- embeddings ---------------------------------------------------------------------------------------
@router.post("/api/embed", openapi_extra=request_body(EmbedBody))
async def embed(request: Request) -> dict[str, Any]:
    """Ollama's embeddings: normalised (Euclidean), cut to ``dimensions``, inputs over the batch cut to it unless
    ``truncate`` is false."""
    started = time.perf_counter_ns()
    body, offload = await read_body(request, EmbedBody)
    if not body.model:
        raise InvalidRequest("model is required", param="model")
    served = _embedding_model(request)
    inputs = [_embedding_input(item) for item in body.items()]
    if not inputs:
        return {"model": body.model, "embeddings": []}
    options = EmbeddingOptions(normalize=2, dimensions=body.dimensions)
    check_dimensions(options, served.embeddings.width)
    media = await served.embeddings.read_media(inputs)
    engine_request = await offload.also_if(any(media))(served.embeddings.request, inputs, options, media)
    if body.truncate:
        engine_request = _truncated(engine_request, served.embeddings.max_input_tokens)
    result = await until_disconnect(request, served.embeddings.embed(engine_request))
    vectors = shaped(result, options, normalize=engine_request.normalize)
    return {
        "model": body.model,
        "embeddings": [vector.tolist() for vector in vectors],
        "total_duration": time.perf_counter_ns() - started,
        "load_duration": 0,
        "prompt_eval_count": result.n_prompt_tokens,
    }


@router.post("/api/embeddings", openapi_extra=request_body(EmbeddingsBody))
async def embeddings(request: Request) -> dict[str, Any]:
    """The legacy route: one prompt, its vector as the model gives it (not normalised); an empty prompt, none."""
    body, offload = await read_body(request, EmbeddingsBody)
    served = _embedding_model(request)
    if not body.prompt:
        return {"embedding": []}
    options = EmbeddingOptions(normalize=-1)
    engine_request = await offload(served.embeddings.request, [body.prompt], options)
    result = await until_disconnect(request, served.embeddings.embed(engine_request))
    return {"embedding": result.vectors[0].tolist()}


def _embedding_model(request: Request) -> Serving:
    served = serving(request)
    pooling = served.embeddings.pooling
    if pooling is None:
        raise NotSupported("this model does not support embeddings: start lfmserve with --embeddings")
    if pooling == "none":
        raise InvalidRequest("Pooling type 'none' gives a vector per token, which Ollama's embeddings cannot carry")
    return served


def _embedding_input(item: str | ImageInput) -> str | ContentPrompt:
    if isinstance(item, str):
        return item
    return ContentPrompt((ContentPart(media_type_of_base64(item.image), source=item.image),))


def _truncated(request: EmbeddingRequest, limit: int) -> EmbeddingRequest:
    """Text inputs cut to the tokens one batch embeds (inputs with media are left whole: a cut could split one)."""
    if request.media or all(len(tokens) <= limit for tokens in request.inputs):
        return request
    return dataclasses.replace(request, inputs=tuple(tokens[:limit] for tokens in request.inputs))


# -- the rest -----------------------------------------------------------------------------------------
# Registered last: every route above wins over it.
@router.api_route("/api/{route:path}", methods=["GET", "POST", "PUT", "DELETE", "HEAD"], include_in_schema=False)
async def management(route: str) -> None:
    raise NotSupported(management_refusal(route))
