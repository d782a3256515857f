"""Every error a client can see, as the API's JSON error body with the right status.

lfmserve's own errors carry their status and type (:mod:`lfmserve.errors`); FastAPI's validation of
query and path values is a 400 naming the parameter; Starlette's 404 and 405 keep their status;
anything unexpected is a 500 with no traceback. A cancelled request has nobody to answer, so it
writes nothing.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import InvalidRequest, LfmError, NotFound, RequestCancelled
from .body import invalid_request

logger = logging.getLogger(__name__)
#: Where Ollama's routes live (llama-server has none of its own there).
OLLAMA_PREFIX = "/api/"


def install_error_handlers(app: FastAPI) -> None:
    """The typed handlers, and :class:`CatchAll` around the whole app for everything else."""
    app.add_exception_handler(RequestCancelled, _cancelled)  # type: ignore[arg-type]
    app.add_exception_handler(LfmError, _lfm_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_middleware(CatchAll)


def error_response(error: LfmError, path: str = "") -> JSONResponse:
    """The error in the shape of the API family ``path`` belongs to: Ollama's routes (``/api/...``) answer
    ``{"error": "message"}``, every other route llama-server's ``{"error": {"code", "message", "type"}}``."""
    body = {"error": error.message} if is_ollama_path(path) else error.to_body()
    return JSONResponse(body, status_code=error.status_code)


def is_ollama_path(path: str) -> bool:
    return path.startswith(OLLAMA_PREFIX)


async def _cancelled(_: Request, exc: RequestCancelled) -> None:
    logger.debug("%s", exc)  # the client has gone: there is no response to write


async def _lfm_error(request: Request, exc: LfmError) -> Response:
    return error_response(exc, request.url.path)


async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    """A query or path value FastAPI could not convert (``/slots?fail_on_no_slot=x``, ``/slots/abc``)."""
    error = dict(exc.errors()[0])
    location = tuple(error.get("loc", ()))
    if location and location[0] in ("query", "path", "body", "header"):
        location = location[1:]
    return error_response(invalid_request({**error, "loc": location}), request.url.path)


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    if exc.status_code == 404:
        return error_response(NotFound(f"File Not Found: {request.url.path}"), request.url.path)
    error = InvalidRequest(str(exc.detail)) if exc.status_code < 500 else LfmError(str(exc.detail))
    if is_ollama_path(request.url.path):
        return JSONResponse({"error": error.message}, status_code=exc.status_code, headers=exc.headers)
    body = error.to_body()
    body["error"]["code"] = exc.status_code
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


class CatchAll:
    """ASGI middleware: an error no handler took is logged once and answered as a 500 in the error shape.

    Starlette's own last resort re-raises after answering, so uvicorn logs the traceback a second time and
    closes the keep-alive connection without saying so; the client's next request on it then fails. Here the
    error ends with the response, and the connection stays usable.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            logger.exception("unexpected error in %s %s", scope["method"], scope["path"])
            if not started:
                error = LfmError(f"Internal server error: {type(exc).__name__}")
                await error_response(error, scope["path"])(scope, receive, send)
