"""Ollama's API on the router: the listings answered from the catalog and the pool, generation and embeddings
passed to the named model's child, and ``keep_alive`` given its meaning.

``/api/tags`` lists every model (read from its files, loaded or not), ``/api/ps`` the loaded ones with when
they expire, ``/api/show`` describes one without loading it, ``/api/pull`` of a Hugging Face name
(``hf.co/org/repo:QUANT``) downloads it and ``/api/delete`` removes one of the cache (:mod:`.downloads`). A
request's model may be named ``name``, ``name:latest`` or by an alias. Its ``keep_alive`` sets how long the model
stays loaded once idle (0: unloaded as soon as the answer is done; negative: for ever; absent: the model's
``--models-ttl``); an empty request (no messages, no prompt) only loads the model, or with ``keep_alive: 0``
unloads it, as Ollama's do. Bodies are parsed with the single server's models
(:mod:`lfmserve.api.ollama.protocol`), so both refuse the same values with the same 400, before any model is
loaded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from ..api.offload import read_body
from ..api.ollama import cards
from ..api.ollama.lifecycle import lifecycle_answer, management_refusal, probe_answer, pull_success
from ..api.ollama.protocol import ChatBody, EmbedBody, EmbeddingsBody, GenerateBody, NamedBody
from ..errors import InvalidRequest, LfmError, NotFound, NotSupported
from ..loading.hub_download import plan_download
from .downloads import Downloads
from .gguf_card import model_card
from .instance import LOADED, Instance
from .ollama_pull import hub_name, pull_answer
from .pool import Pool

#: Passes a request on to an instance's child: (request, instance, path, body) -> the child's answer.
Send = Callable[[Request, Instance, str, bytes], Awaitable[Response]]
#: A body a model's child takes: generation or embeddings.
ModelBody = ChatBody | GenerateBody | EmbedBody | EmbeddingsBody
#: The routes a model's child answers, and the body each takes.
_GENERATION: dict[str, type[ModelBody]] = {
    "/api/chat": ChatBody,
    "/api/generate": GenerateBody,
    "/api/embed": EmbedBody,
    "/api/embeddings": EmbeddingsBody,
}


def add_ollama_routes(app: FastAPI, pool: Pool, downloads: Downloads, send: Send) -> None:
    @app.api_route("/", methods=["GET", "HEAD"])
    async def probe(request: Request) -> Response:
        return probe_answer(request.headers.get("accept", ""))

    @app.api_route("/api/version", methods=["GET", "HEAD"])
    async def version() -> dict[str, str]:
        return {"version": cards.OLLAMA_VERSION}

    @app.get("/api/tags")
    async def tags() -> dict[str, Any]:
        listed = sorted((i for i in pool.registry.instances.values() if not i.spec.hidden), key=lambda i: i.name)
        return {"models": [cards.tags_entry(card) for card in await _cards(listed)]}

    @app.get("/api/ps")
    async def ps() -> dict[str, Any]:
        loaded = sorted((i for i in pool.registry.instances.values() if i.status == LOADED), key=lambda i: i.name)
        now, clock = time.time(), time.monotonic()
        return {
            "models": [
                cards.ps_entry(card, now=now, keep_s=instance.kept_for(clock))
                for instance, card in zip(loaded, await _cards(loaded), strict=True)
            ]
        }

    @app.post("/api/show")
    async def show(request: Request) -> dict[str, Any]:
        body, _ = await read_body(request, NamedBody)
        instance = _named(pool, body.model_name)
        return cards.show((await _cards([instance]))[0])

    _add_hub_routes(app, pool, downloads)
    for path, kind in _GENERATION.items():
        app.add_api_route(path, _generation_route(pool, send, path, kind), methods=["POST"])

    @app.api_route("/api/{route:path}", methods=["GET", "POST", "PUT", "DELETE", "HEAD"])
    async def management(route: str) -> None:
        raise NotSupported(management_refusal(route))


def _add_hub_routes(app: FastAPI, pool: Pool, downloads: Downloads) -> None:
    """``/api/pull`` and ``/api/delete``: a model of the Hugging Face hub downloaded and removed."""

    @app.post("/api/pull")
    async def pull(request: Request) -> Response:
        """A model the router has is there at once; one of the hub (``hf.co/...``) is downloaded."""
        body, _ = await read_body(request, NamedBody)
        if _found(pool, body.model_name) is not None:
            return pull_success(stream=body.stream)
        name = hub_name(body.model_name)
        if name is None:
            raise _unknown(body.model_name)
        download = downloads.get(name)
        if download is None:
            download = await downloads.start(await asyncio.to_thread(plan_download, name, downloads.token))
        return await pull_answer(download, stream=body.stream)

    @app.delete("/api/delete")
    async def delete(request: Request) -> Response:
        """Removes a model of the Hugging Face cache (or cancels its download), as ``DELETE /models`` does."""
        body, _ = await read_body(request, NamedBody)
        found = _found(pool, body.model_name)
        name = found.name if found is not None else hub_name(body.model_name)
        if name is None or (found is None and downloads.get(name) is None):
            raise _unknown(body.model_name)
        await downloads.remove(name)
        return Response()


def _generation_route(
    pool: Pool, send: Send, path: str, kind: type[ModelBody]
) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        body, _ = await read_body(request, kind)
        instance = _named(pool, body.model)
        if isinstance(body, ChatBody | GenerateBody) and body.lifecycle_only:
            chat = isinstance(body, ChatBody)
            return JSONResponse(await _load_or_unload(pool, instance, body.model, body.keep_alive, chat=chat))
        instance.keep_alive_s = body.keep_alive
        return await send(request, instance, path, await request.body())

    return route


async def _load_or_unload(pool: Pool, instance: Instance, name: str, keep: float | None, *, chat: bool) -> Any:
    if keep == 0:
        if instance.running:
            await pool.unload(instance.name)
        while instance.running:  # Ollama answers once the model is gone
            await instance.changed.wait()
        return lifecycle_answer(name, "unload", chat=chat)
    await pool.acquire(instance, autoload=True, touch=True)
    pool.release(instance)
    instance.keep_alive_s = keep
    return lifecycle_answer(name, "load", chat=chat)


async def _cards(instances: list[Instance]) -> list[cards.ModelCard]:
    """The instances' cards, read off the event loop (a GGUF header not read before takes a moment); a running
    child's context is the one it reports (``--fit`` may have shrunk the one its files promise)."""
    read = await asyncio.to_thread(lambda: [model_card(instance.spec) for instance in instances])
    return [_with_reported_context(card, instance) for card, instance in zip(read, instances, strict=True)]


def _with_reported_context(card: cards.ModelCard, instance: Instance) -> cards.ModelCard:
    meta = (instance.info or {}).get("meta") if instance.running else None
    n_ctx = meta.get("n_ctx") if isinstance(meta, dict) else None
    return dataclasses.replace(card, context_length=n_ctx) if isinstance(n_ctx, int) else card


def _named(pool: Pool, name: str) -> Instance:
    """The model a request names, in any of Ollama's forms; 400 without a name, 404 for an unknown one."""
    instance = _found(pool, name)
    if instance is None:
        raise _unknown(name)
    return instance


def _unknown(name: str) -> LfmError:
    """What a request whose name finds no model gets: 400 for no name, else 404."""
    if not name:
        return InvalidRequest("model is required", param="model")
    return NotFound(f"model '{name}' not found")


def _found(pool: Pool, name: str) -> Instance | None:
    """The model ``name`` stands for in any of Ollama's forms, a hub model's (``hf.co/org/repo:QUANT``) included."""
    hub = hub_name(name)
    for form in [*cards.name_forms(name), *([hub] if hub else [])]:
        instance = pool.registry.find(form)
        if instance is not None:
            return instance
    return None
