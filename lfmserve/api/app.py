"""The app factory: llama-server's routes behind the gate, one error handler per kind, and the loading state.

``create_app(settings, load)`` returns a FastAPI app whose lifespan runs ``load`` in a thread; until it
returns, every route answers 503 ``Loading model`` (as llama-server does). With ``--sleep-idle-seconds``
the model is unloaded when idle and loaded again on demand (:mod:`~lfmserve.api.sleep`). Handlers parse bodies,
call :class:`~lfmserve.chat.serving.Serving`, and choose JSON or SSE; every error reaches the client
as ``{"error": {...}}`` (:mod:`~lfmserve.api.handlers`), and no traceback ever does. A request whose
client has gone is answered with nothing. The web UI (:mod:`~lfmserve.api.webui`) is served at ``/`` unless
``--no-ui``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from ..chat.serving import Serving
from ..settings import Settings
from .anthropic.router import router as anthropic_router
from .edge import add_edge
from .embeddings import router as embeddings_router
from .features import add_agent_routes
from .lora import router as lora_router
from .native.router import router as native_router
from .ollama.router import router as ollama_router
from .openai.router import router as openai_router
from .openai_responses.router import router as responses_router
from .openapi import install_openapi
from .rerank import router as rerank_router
from .resumable import ResumableStreams
from .sleep import Sleeper
from .slots import router as slots_router
from .state import AppState
from .stream_sessions import StreamSessions
from .streams import router as streams_router
from .trace import TraceRecorder
from .transcriptions import router as transcriptions_router
from .vertex import VertexRoutes, install_vertex

logger = logging.getLogger(__name__)

#: Every API family's routes, in the order they are matched.
_ROUTERS = (
    native_router,
    openai_router,
    responses_router,
    anthropic_router,
    embeddings_router,
    rerank_router,
    transcriptions_router,
    slots_router,
    lora_router,
    streams_router,
    ollama_router,  # last: its /api/{route} refusal must not shadow another family's route
)


def create_app(
    settings: Settings,
    load: Callable[[], Serving],
    on_load_error: Callable[[BaseException], None] | None = None,
    on_ready: Callable[[], None] | None = None,
    sleep_clock: Callable[[], float] = time.monotonic,
) -> FastAPI:
    """The app; ``on_load_error`` is told when ``load`` fails (the CLI then exits, like llama-server), ``on_ready``
    when the model serves (a router's child tells its router). ``--sleep-idle-seconds`` counts on ``sleep_clock``
    (the app's ``state.sleeper``; a test moves a clock of its own)."""
    state = AppState(settings, settings.server.ui_settings)
    streams = state.streams
    idle_s = settings.server.sleep_idle_seconds
    sleeper = Sleeper(state, load, idle_s, sleep_clock) if idle_s > 0 else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, AppState | StreamSessions]]:
        loading = asyncio.create_task(_start(state, load, on_load_error, on_ready, sleeper))
        try:
            yield {"app_state": state, "streams": streams}
        finally:
            loading.cancel()
            for end in state.on_drain:  # stopped already when a drain ran: each may be called again
                await asyncio.to_thread(end)
            if state.serving is not None:
                await asyncio.to_thread(state.serving.engine.close)

    app = FastAPI(title="lfmserve", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.app_state = state  # the CLI's server drains it on shutdown
    app.state.sleeper = sleeper
    # The middleware added first runs innermost: CORS, the --api-prefix, the catch-all, the web UI, the gate, the
    # sleeper, the trace recorder (only requests the gate let through), the resumable streams, then the routes.
    app.add_middleware(ResumableStreams, sessions=streams)
    if settings.server.trace_requests:
        app.add_middleware(TraceRecorder, path=settings.server.trace_requests)
    if sleeper is not None:
        app.add_middleware(sleeper.wrap)
    add_edge(app, settings, unavailable=state.unavailable)
    close_tools = add_agent_routes(app, settings.agent)
    if close_tools is not None:
        state.on_drain.append(close_tools)
    for router in _ROUTERS:
        app.include_router(router)
    install_openapi(app)
    vertex = VertexRoutes.from_environ(os.environ)  # Vertex AI's variables, as llama-server reads them
    if vertex is not None:
        install_vertex(app, vertex, _ROUTERS)
    return app


async def _start(
    state: AppState,
    load: Callable[[], Serving],
    on_error: Callable[[BaseException], None] | None,
    on_ready: Callable[[], None] | None,
    sleeper: Sleeper | None,
) -> None:
    """Load the model; then, with ``--sleep-idle-seconds``, watch for idle time for the server's life."""
    t0 = getattr(load, "started", time.perf_counter())  # a load begun before the app (the CLI's): from then
    try:
        state.install(await asyncio.to_thread(load))
        logger.info("model loaded in %.1f s; server is ready", time.perf_counter() - t0)
        if on_ready is not None:
            on_ready()
    except Exception as exc:
        state.load_error = exc
        if on_error is not None:
            on_error(exc)  # the caller reports it (the CLI, as its one line before exiting)
        else:
            logger.error("model failed to load: %s", exc)
        return
    if sleeper is not None:
        await sleeper.watch()
