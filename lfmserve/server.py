"""The HTTP app: llama-server's routes, its error bodies, API keys and the loading state.

``create_app(settings, load)`` returns a FastAPI app whose lifespan runs ``load`` in a thread;
until it returns, every route answers 503 ``Loading model`` (as llama-server does). Handlers parse
bodies with :func:`~lfmserve.protocol.parse_body`, call :class:`~lfmserve.serving.Serving`, and
choose JSON or SSE; every error is an :class:`~lfmserve.errors.LfmError` turned into
``{"error": {...}}`` by one handler, and nothing else (no traceback) ever reaches a client.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import (
    AuthenticationFailed,
    InvalidRequest,
    LfmError,
    NotFound,
    NotSupported,
    RequestCancelled,
    Unavailable,
)
from .monitoring import metrics_registry, slots_json
from .protocol import (
    ApplyTemplateRequest,
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    SlotFileRequest,
    TokenizeRequest,
    parse_body,
)
from .serving import Serving
from .settings import Settings

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: Routes that need no API key (llama-server's public endpoints).
PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/models", "/v1/models"})


@dataclass(slots=True)
class AppState:
    """What the handlers share; ``serving`` is None until the model has loaded."""

    settings: Settings
    api_keys: tuple[bytes, ...]
    serving: Serving | None = None
    load_error: BaseException | None = None
    metrics: CollectorRegistry | None = None


def create_app(
    settings: Settings, load: Callable[[], Serving], on_load_error: Callable[[BaseException], None] | None = None
) -> FastAPI:
    """The app; ``on_load_error`` is told when ``load`` fails (the CLI then exits, like llama-server)."""
    state = AppState(settings, tuple(k.encode() for k in settings.api_keys))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, AppState]]:
        loading = asyncio.create_task(_load(state, load, on_load_error))
        try:
            yield {"app_state": state}
        finally:
            loading.cancel()
            if state.serving is not None:
                await asyncio.to_thread(state.serving.engine.close)

    app = FastAPI(title="lfmserve", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_middleware(_Gate, state=state)
    _install_error_handlers(app)
    _install_routes(app)
    return app


async def _load(state: AppState, load: Callable[[], Serving], on_error: Callable[[BaseException], None] | None) -> None:
    t0 = time.perf_counter()
    try:
        serving = await asyncio.to_thread(load)
        state.metrics = metrics_registry(serving.engine)
        state.serving = serving
        logger.info("model loaded in %.1f s; server is ready", time.perf_counter() - t0)
    except Exception as exc:
        state.load_error = exc
        logger.error("model failed to load: %s", exc)
        if on_error is not None:
            on_error(exc)


def _serving(request: Request) -> Serving:
    serving: Serving | None = request.state.app_state.serving
    assert serving is not None  # the middleware answers 503 until it is set
    return serving


def _error_response(error: LfmError) -> JSONResponse:
    return JSONResponse(error.to_body(), status_code=error.status_code)


class _Gate:
    """ASGI middleware: 503 while loading, 401 without a valid key (public routes excepted)."""

    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            error = self._refusal(scope)
            if error is not None:
                await _error_response(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> LfmError | None:
        state = self.state
        if state.serving is None:
            if state.load_error is None:
                return Unavailable("Loading model")
            return Unavailable(f"Model failed to load: {state.load_error}")
        if state.api_keys and scope["path"] not in PUBLIC_PATHS and scope["method"] != "OPTIONS":
            if not _key_ok(Headers(scope=scope), state.api_keys):
                return AuthenticationFailed("Invalid API Key")
        return None


def _key_ok(headers: Headers, keys: tuple[bytes, ...]) -> bool:
    """Bearer token or X-Api-Key, compared in constant time against every configured key."""
    auth = headers.get("authorization", "")
    given = auth[7:].strip() if auth[:7].lower() == "bearer " else headers.get("x-api-key", "")
    candidate = given.encode()
    return any([hmac.compare_digest(candidate, key) for key in keys])


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(LfmError)
    async def lfm_error(_: Request, exc: LfmError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return _error_response(NotFound(f"File Not Found: {request.url.path}"))
        error = LfmError(str(exc.detail))
        body = error.to_body()
        body["error"].update(
            code=exc.status_code, type="invalid_request_error" if exc.status_code < 500 else "server_error"
        )
        return JSONResponse(body, status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error")
        return _error_response(LfmError(f"Internal server error: {type(exc).__name__}"))


async def _until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run ``work`` but give up (cancelling it, hence the generation) when the client disconnects."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        raise RequestCancelled("client disconnected")
    return task.result()


def _sse(chunks: AsyncIterator[dict[str, Any]], *, done_marker: bool) -> StreamingResponse:
    async def frames() -> AsyncIterator[bytes]:
        try:
            async for chunk in chunks:
                yield b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"
        except RequestCancelled:
            return
        except LfmError as exc:
            yield b"error: " + json.dumps(exc.to_body()).encode() + b"\n\n"
            return
        if done_marker:
            yield b"data: [DONE]\n\n"

    return StreamingResponse(
        frames(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


def _install_routes(app: FastAPI) -> None:
    @app.get("/health")
    @app.get("/v1/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    @app.get("/models")
    async def models(request: Request) -> dict[str, Any]:
        serving = _serving(request)
        info, engine = serving.model.info, serving.engine
        settings: Settings = request.state.app_state.settings
        entry = {
            "id": serving.model_name,
            "aliases": [settings.alias] if settings.alias else [],
            "tags": [],
            "object": "model",
            "created": int(time.time()),
            "owned_by": "llamacpp",
            "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
            "meta": {
                "vocab_type": info.vocab_type,
                "n_vocab": info.n_vocab,
                "n_ctx": engine.n_ctx_slot,
                "n_ctx_train": info.n_ctx_train,
                "n_embd": info.n_embd,
                "n_params": info.n_params,
                "size": info.size_bytes,
            },
        }
        return {
            "object": "list",
            "data": [entry],
            "models": [
                {
                    "name": serving.model_name,
                    "model": serving.model_name,
                    "type": "model",
                    "capabilities": ["completion"],
                }
            ],
        }

    @app.get("/props")
    async def props(request: Request) -> dict[str, Any]:
        serving = _serving(request)
        info = serving.model.info
        return {
            "default_generation_settings": {
                "n_ctx": serving.engine.n_ctx_slot,
                "params": {
                    **serving.defaults.params.to_json(),
                    "n_predict": serving.default_max_tokens,
                    "max_tokens": serving.default_max_tokens,
                },
            },
            "sampling_sources": serving.defaults.sources,
            "lfm_family": serving.defaults.family,
            "total_slots": serving.engine.n_slots,
            "model_alias": serving.model_name,
            "model_path": info.path,
            "modalities": {"vision": False, "audio": False},
            "chat_template": serving.template.source,
            "chat_template_caps": serving.template.caps.to_json(),
            "bos_token": info.bos_token,
            "eos_token": info.eos_token,
            "build_info": serving.fingerprint,
            "is_sleeping": False,
            "model": {
                "architecture": info.architecture,
                "name": info.name,
                "description": info.description,
                "n_ctx_train": info.n_ctx_train,
                "n_params": info.n_params,
                "size": info.size_bytes,
                "n_vocab": info.n_vocab,
                "vocab_type": info.vocab_type_name,
                "is_hybrid": info.is_hybrid,
                "is_recurrent": info.is_recurrent,
                "n_swa": info.n_swa,
            },
        }

    @app.post("/v1/chat/completions")
    @app.post("/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body = parse_body(ChatCompletionRequest, await request.body())
        serving = _serving(request)
        if body.stream:
            return _sse(serving.chat_completion_chunks(body), done_marker=True)
        return JSONResponse(await _until_disconnect(request, serving.chat_completion(body)))

    @app.post("/completion")
    @app.post("/completions")
    async def completion(request: Request) -> Response:
        body = parse_body(CompletionRequest, await request.body())
        serving = _serving(request)
        if body.stream:
            return _sse(serving.native_chunks(body), done_marker=False)
        results = await _until_disconnect(request, serving.run_completions(body))
        out = [serving.native_result(body, req, done, done.last, index=i) for i, (req, done) in enumerate(results)]
        return JSONResponse(out[0] if len(out) == 1 else out)

    @app.post("/v1/completions")
    async def openai_completions(request: Request) -> Response:
        body = parse_body(CompletionRequest, await request.body())
        serving = _serving(request)
        if body.stream:
            return _sse(serving.openai_completion_chunks(body), done_marker=True)
        results = await _until_disconnect(request, serving.run_completions(body))
        choices = [serving.openai_completion(body, done, index=i) for i, (_, done) in enumerate(results)]
        return JSONResponse(serving.openai_completion_body(choices, [done.last for _, done in results]))

    @app.get("/slots")
    async def slots(request: Request, fail_on_no_slot: bool = False) -> Any:
        state: AppState = request.state.app_state
        if not state.settings.slots_endpoint:
            raise NotSupported("This server does not support slots endpoint.")
        engine = _serving(request).engine
        if fail_on_no_slot and all(slot.busy for slot in engine.slots):
            raise Unavailable("no slot available")
        return slots_json(engine)

    @app.post("/slots/{id_slot}")
    async def slot_action(request: Request, id_slot: int, action: str = "") -> dict[str, Any]:
        state: AppState = request.state.app_state
        if not state.settings.slot_save_path:
            raise NotSupported("This server does not support slots action (start it with --slot-save-path).")
        engine = _serving(request).engine
        if action == "erase":
            return {"id_slot": id_slot, "n_erased": await asyncio.to_thread(engine.clear_slot, id_slot)}
        if action not in ("save", "restore"):
            raise InvalidRequest(f"Invalid action '{action}': use save, restore or erase", param="action")
        filename = parse_body(SlotFileRequest, await request.body()).filename
        path = str(Path(state.settings.slot_save_path) / filename)
        t0 = time.perf_counter()
        if action == "save":
            n_saved, n_written = await asyncio.to_thread(engine.save_slot, id_slot, path)
            return {
                "id_slot": id_slot,
                "filename": filename,
                "n_saved": n_saved,
                "n_written": n_written,
                "timings": {"save_ms": 1e3 * (time.perf_counter() - t0)},
            }
        if not Path(path).is_file():
            raise NotFound(f"no saved slot named {filename}")
        n_restored, n_read = await asyncio.to_thread(engine.restore_slot, id_slot, path)
        return {
            "id_slot": id_slot,
            "filename": filename,
            "n_restored": n_restored,
            "n_read": n_read,
            "timings": {"restore_ms": 1e3 * (time.perf_counter() - t0)},
        }

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        state: AppState = request.state.app_state
        if not state.settings.metrics or state.metrics is None:
            raise NotSupported("This server does not support metrics endpoint (start it with --metrics).")
        return Response(generate_latest(state.metrics), media_type=CONTENT_TYPE_LATEST)

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        body = parse_body(TokenizeRequest, await request.body())
        return _serving(request).tokenize(
            body.content, add_special=body.add_special, parse_special=body.parse_special, with_pieces=body.with_pieces
        )

    @app.post("/detokenize")
    async def detokenize(request: Request) -> dict[str, Any]:
        body = parse_body(DetokenizeRequest, await request.body())
        return _serving(request).detokenize(body.tokens)

    @app.post("/apply-template")
    async def apply_template(request: Request) -> dict[str, Any]:
        body = parse_body(ApplyTemplateRequest, await request.body())
        return {"prompt": _serving(request).render_chat(body)}
