"""The router's HTTP app: its own routes (``/health``, ``/models``, ``/models/load|unload|sse``, ``/props``
without a model, llama-swap's ``/running``, ``/unload`` and ``/upstream/{model}/...``, Ollama's API in
:mod:`~lfmserve.router.ollama`), and every other route passed to the child of the model the request names.

The model is named by the JSON body's ``model`` (POST), the multipart form's ``model`` field
(``/v1/audio/transcriptions``), or ``?model=`` (GET, and any route when the body has none); aliases count.
``?autoload=`` overrides ``--models-autoload`` for one request. API keys are checked here, once; children accept
only the router's own key. A POST with ``X-Conversation-Id`` is a resumable stream's
(:mod:`~lfmserve.router.streams`): its client leaving while the model loads does not cancel it, a stop does.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse

from ..api.edge import add_edge
from ..api.features import add_agent_routes
from ..api.monitoring import CONTENT_TYPE, prometheus_text
from ..api.sse import unless, until_disconnect
from ..api.stream_sessions import CONVERSATION_HEADER
from ..errors import InvalidRequest, NotFound, NotSupported
from ..loading.hub_download import plan_download
from ..settings import Settings
from .catalog import ModelSpec, build_catalog
from .conversations import ConversationOwners, Ticket
from .downloads import Downloads
from .events import Events
from .instance import Instance
from .listing import model_list, router_props, running
from .ollama import add_ollama_routes
from .pool import Pool
from .preset import canonical_name
from .proxy import Proxy
from .spawn import Spawner
from .streams import add_stream_routes

logger = logging.getLogger(__name__)
_ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]
#: The routes a model's child answers and the router does not answer itself (the server of one model's route table,
#: less health, the model list, ``GET /props``, the resumable streams and Ollama's API), by method: a request on one
#: is passed to the model it names. Any other path is llama-server's 404, model or not, so a stray request
#: (``/favicon.ico``, a scanner's) loads no model.
_MODEL_ROUTES = {
    "POST": (
        "/completion", "/completions", "/v1/completions", "/infill", "/tokenize", "/detokenize", "/apply-template",
        "/chat/completions", "/v1/chat/completions", "/v1/chat/completions/control", "/chat/completions/input_tokens",
        "/v1/chat/completions/input_tokens", "/responses", "/v1/responses", "/responses/input_tokens",
        "/v1/responses/input_tokens", "/v1/messages", "/v1/messages/count_tokens", "/embedding", "/embeddings",
        "/v1/embeddings", "/rerank", "/reranking", "/v1/rerank", "/v1/reranking", "/audio/transcriptions",
        "/v1/audio/transcriptions", "/props", "/slots/{id_slot}", "/lora-adapters",
    ),
    "GET": ("/slots", "/lora-adapters"),
}  # fmt: skip
#: Bodies parsed on a worker thread (a large image in base64 takes the loop tens of milliseconds to parse).
_THREAD_PARSE_BYTES = 1 << 20


def create_router_app(settings: Settings, catalog: dict[str, ModelSpec], spawner: Spawner) -> FastAPI:
    events = Events()
    pool = Pool(catalog, settings.router, spawner, events, describe=lambda child: _describe(proxy, child))
    proxy = Proxy(pool)
    downloads = Downloads(events, pool, settings.source.hf_token, refresh=lambda: _reload(pool, settings))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool.start()
        try:
            yield
        finally:
            await downloads.close()
            await pool.close()
            await proxy.close()

    app = FastAPI(title="lfmserve router", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.pool = pool
    app.state.events = events  # the server's drain ends the event streams, then the proxied requests
    app.state.proxy = proxy
    add_edge(app, settings)
    # The router runs the tools and the proxy itself, as llama-server's does; its drain stops the MCP servers.
    app.state.close_tools = add_agent_routes(app, settings.agent)
    _add_model_routes(app, settings, pool, events, downloads)
    _add_download_routes(app, settings, downloads)

    async def send(request: Request, instance: Instance, path: str, body: bytes) -> Response:
        return await _send(request, proxy, instance, path, autoload=_autoload(request, settings), body=body)

    add_ollama_routes(app, pool, downloads, send)
    owners = ConversationOwners()
    add_stream_routes(app, proxy, owners)
    _add_proxied_routes(app, settings, pool, proxy, owners)
    return app


async def _describe(proxy: Proxy, child: Any) -> dict[str, Any]:
    listing = await proxy.get_json(child, "/v1/models")
    entry: dict[str, Any] = listing["data"][0]
    return entry


async def _reload(pool: Pool, settings: Settings) -> None:
    """The router's models, found again in their sources (``GET /models?reload=1``, a download or removal)."""
    await pool.reload(await asyncio.to_thread(build_catalog, settings))


def _add_model_routes(app: FastAPI, settings: Settings, pool: Pool, events: Events, downloads: Downloads) -> None:
    """The router's own routes: health, the model list, loading and unloading (a download's cancel), events,
    llama-swap's views."""

    @app.get("/health")
    @app.get("/v1/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/models")
    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        if request.query_params.get("reload"):
            await _reload(pool, settings)
        listing = await model_list(list(pool.registry.instances.values()))
        listing["data"] = sorted(listing["data"] + downloads.entries(), key=lambda entry: str(entry["id"]))
        return listing

    @app.post("/models/load")
    async def load(request: Request) -> dict[str, bool]:
        pool.load(_required_name(_body_name(await _json(request))))
        return {"success": True}

    @app.post("/models/unload")
    async def unload(request: Request) -> dict[str, bool]:
        name = _required_name(_body_name(await _json(request)))
        download = downloads.get(canonical_name(name))
        if download is None:
            await pool.unload(name)
        else:
            await downloads.cancel(download.name)
        return {"success": True}

    @app.get("/models/sse")
    async def model_events() -> StreamingResponse:
        async def frames() -> AsyncIterator[bytes]:
            async for event in events.listen():
                yield f"data: {json.dumps(event)}\n\n".encode()

        return StreamingResponse(frames(), media_type="text/event-stream")

    @app.get("/running")
    async def running_models() -> dict[str, Any]:
        return running(pool.registry.every_instance())  # a retiring model's child too, while it stops

    @app.api_route("/unload", methods=["GET", "POST"])
    async def unload_all() -> PlainTextResponse:
        await asyncio.gather(*(pool.unload(i.name) for i in pool.registry.instances.values() if i.running))
        return PlainTextResponse("OK")


def _add_download_routes(app: FastAPI, settings: Settings, downloads: Downloads) -> None:
    """``POST /models`` and ``DELETE /models``: a model downloaded from the hub, or removed from the cache."""

    @app.post("/models")
    async def download(request: Request) -> dict[str, bool]:
        """Starts a download from the hub; answered once it runs (its progress is on ``/models/sse``)."""
        name = canonical_name(_required_name(_body_name(await _json(request))))
        await downloads.start(await asyncio.to_thread(plan_download, name, settings.source.hf_token))
        return {"success": True}

    @app.delete("/models")
    async def remove(request: Request) -> dict[str, bool]:
        await downloads.remove(canonical_name(_required_name(request.query_params.get("model"))))
        return {"success": True}


def _add_proxied_routes(app: FastAPI, settings: Settings, pool: Pool, proxy: Proxy, owners: ConversationOwners) -> None:
    """The routes answered by a model's child: ``/props?model=``, llama-swap's ``/upstream/{model}/...``, and
    the model routes the router does not answer itself (``_MODEL_ROUTES``)."""
    ui_settings = settings.server.ui_settings

    @app.get("/props")
    async def props(request: Request) -> Response:
        if "model" not in request.query_params:
            return JSONResponse(router_props(settings.router, ui_settings))
        return await _forward(request, pool, proxy, settings, owners)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        """``?model=``: that model's; else the router's own (its conversations), with ``--metrics`` as a model's."""
        if "model" in request.query_params:
            return await _forward(request, pool, proxy, settings, owners)
        if not settings.server.metrics:
            raise NotSupported("This server does not support metrics endpoint (start it with --metrics).")
        return Response(prometheus_text(owners.metrics()), media_type=CONTENT_TYPE)

    @app.api_route("/upstream/{model:path}", methods=_ALL_METHODS)
    async def upstream(request: Request, model: str) -> Response:
        name, slash, rest = _split_upstream(pool, model)
        if not slash:
            return RedirectResponse(f"/upstream/{name}/", status_code=301)
        instance = pool.registry.find(name)
        if instance is None:
            raise NotFound("model not found")
        return await _send(request, proxy, instance, "/" + rest, autoload=True, body=await request.body())

    async def routed(request: Request) -> Response:
        return await _forward(request, pool, proxy, settings, owners)

    for method, paths in _MODEL_ROUTES.items():
        for path in paths:
            app.add_api_route(path, routed, methods=[method])


def _split_upstream(pool: Pool, model_and_path: str) -> tuple[str, str, str]:
    """``org/repo:Q8_0/v1/models`` -> the longest leading name a model has (names may hold slashes), then the rest."""
    parts = model_and_path.split("/")
    for cut in range(len(parts), 0, -1):
        name = "/".join(parts[:cut])
        if pool.registry.find(name) is not None:
            return name, "/" if parts[cut:] else "", "/".join(parts[cut:])
    return model_and_path.partition("/")


async def _forward(
    request: Request, pool: Pool, proxy: Proxy, settings: Settings, owners: ConversationOwners
) -> Response:
    body = await request.body()
    instance = pool.registry.get(_required_name(await _model_name(request, body)))
    conversation_id = request.headers.get(CONVERSATION_HEADER, "")
    # Remembered before the load, so a stop while the model loads finds the request and cancels it.
    ticket = owners.remember(conversation_id, instance) if conversation_id and request.method == "POST" else None
    return await _send(
        request, proxy, instance, request.url.path, autoload=_autoload(request, settings), body=body, ticket=ticket
    )


def _autoload(request: Request, settings: Settings) -> bool:
    """``?autoload=`` for this request (``true`` or ``1`` loads), else, as when it is empty, ``--models-autoload``."""
    autoload = request.query_params.get("autoload")
    return autoload in ("1", "true") if autoload else settings.router.models_autoload


async def _send(
    request: Request,
    proxy: Proxy,
    instance: Instance,
    path: str,
    *,
    autoload: bool,
    body: bytes,
    ticket: Ticket | None = None,
) -> Response:
    query = "&".join(part for part in request.url.query.split("&") if part and not part.startswith("autoload="))
    forwarded = proxy.forward(
        instance,
        method=request.method,
        path=path,
        query=query,
        headers=list(request.headers.items()),
        body=body,
        autoload=autoload,
    )
    if ticket is not None and not instance.serving:
        # A resumable stream's request outlives its client while its model loads (a page reloaded meanwhile): only
        # a stop of its conversation, or a newer request of it, gives up its place (llama-server's ticket).
        stop = InvalidRequest("request cancelled by a stop while the model was loading")
        return await unless(ticket.stopped.wait(), forwarded, stop)
    # A client that leaves while its model loads or its answer is made gives up its place in the queue (and ends
    # the generation); once an answer streams, the streaming response watches for that itself.
    return await until_disconnect(request, forwarded)


async def _model_name(request: Request, body: bytes) -> str | None:
    """The body's ``model`` (JSON or a multipart form), else ``?model=``."""
    kind = request.headers.get("content-type", "")
    name: Any = None
    if body and kind.startswith("multipart/form-data"):
        form = await request.form()
        name = form.get("model")
    elif body and request.method != "GET":
        try:
            parsed = await asyncio.to_thread(json.loads, body) if len(body) > _THREAD_PARSE_BYTES else json.loads(body)
        except ValueError:
            parsed = None
        name = parsed.get("model") if isinstance(parsed, dict) else None
    if isinstance(name, str) and name:
        return name
    return request.query_params.get("model")


async def _json(request: Request) -> Any:
    try:
        return json.loads(await request.body() or b"{}")
    except ValueError as exc:
        raise InvalidRequest(f"invalid JSON body: {exc}") from exc


def _required_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidRequest("model name is missing from the request")
    return name


def _body_name(body: Any) -> Any:
    return body.get("model") if isinstance(body, dict) else None
