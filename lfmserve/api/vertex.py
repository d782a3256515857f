"""Vertex AI's prediction protocol (``AIP_MODE=PREDICTION``), as llama-server's ``register_gcp_compat`` serves it.

``POST {AIP_PREDICT_ROUTE}`` (default ``/predict``) takes ``{"instances": [...]}``: each instance is the body
of another route, named by its ``@requestFormat`` (the route's path in camelCase, ``/v1/chat/completions``
-> ``chatCompletions``, or the path itself). The instances run concurrently, each through the whole app
(its gate, handler and error handler), without streaming; the answer is ``{"predictions": [...]}``, one
response body per instance in order, an error body where that instance failed. ``AIP_HEALTH_ROUTE``
adds a second health route.

Example::

    vertex = VertexRoutes.from_environ(os.environ)
    if vertex is not None:
        install_vertex(app, vertex, routers)
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.types import Message

from ..errors import InvalidRequest, LfmError
from .native.router import health

logger = logging.getLogger(__name__)

#: llama-server's cap on the instances of one prediction request.
MAX_INSTANCES = 128


@dataclass(frozen=True, slots=True)
class VertexRoutes:
    """Where Vertex AI expects the prediction and health routes (its ``AIP_*`` variables)."""

    predict_route: str = "/predict"
    #: None: only the server's own ``/health``.
    health_route: str | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> VertexRoutes | None:
        """The routes ``AIP_MODE=PREDICTION`` asks for, or None outside Vertex AI."""
        if environ.get("AIP_MODE", "") != "PREDICTION":
            return None
        return cls(_route(environ.get("AIP_PREDICT_ROUTE")) or "/predict", _route(environ.get("AIP_HEALTH_ROUTE")))


def _route(value: str | None) -> str | None:
    """A route from an ``AIP_*`` variable, with the leading slash llama-server adds when it is missing."""
    return None if not value else value if value.startswith("/") else "/" + value


def request_format(path: str) -> str:
    """A route's ``@requestFormat`` name: the path without ``/v1``, camelCased at ``/``, ``-`` and ``_``, cut
    before a path parameter (``/apply-template`` -> ``applyTemplate``)."""
    name, capital = "", False
    for char in path.removeprefix("/v1").lstrip("/"):
        if char in ":{":
            break
        if char in "/-_":
            capital = True
        else:
            name += char.upper() if capital else char
            capital = False
    return name


def install_vertex(app: FastAPI, vertex: VertexRoutes, routers: Iterable[APIRouter]) -> None:
    """Add the prediction route (and the extra health route) to ``app``, which includes ``routers``: their
    routes are the ones an instance can name.

    A prediction route that is one of the server's own routes fails at startup, as in llama-server.
    """
    routes = {route.path: route for router in routers for route in router.routes if isinstance(route, APIRoute)}
    if vertex.predict_route in routes:
        raise LfmError(f"AIP_PREDICT_ROUTE={vertex.predict_route} conflicts with an existing route")
    targets: dict[str, APIRoute] = {}
    for path, route in sorted(routes.items()):  # the first path with a name keeps it, as in llama-server
        targets.setdefault(request_format(path), route)
    targets.update(routes)

    async def predict(request: Request) -> JSONResponse:
        instances = _instances(await request.body())
        predictions = await asyncio.gather(*(_predict_one(request, targets, instance) for instance in instances))
        return JSONResponse({"predictions": list(predictions)})

    app.add_api_route(vertex.predict_route, predict, methods=["POST"], include_in_schema=False)
    if vertex.health_route is not None:
        app.add_api_route(vertex.health_route, health, methods=["GET"], include_in_schema=False)


def _instances(raw: bytes) -> list[Any]:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise InvalidRequest(f"Invalid JSON body: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidRequest("request body must be a JSON object")
    instances = data.get("instances")
    if not isinstance(instances, list):
        raise InvalidRequest("request body must include an array field named instances", param="instances")
    if len(instances) > MAX_INSTANCES:
        raise InvalidRequest(f"instances array exceeds maximum size of {MAX_INSTANCES}", param="instances")
    return instances


async def _predict_one(request: Request, targets: Mapping[str, APIRoute], instance: Any) -> Any:
    """One instance's answer: the body its route answers (an error body for a failed one)."""
    if not isinstance(instance, dict):
        return InvalidRequest("each instance must be a JSON object").to_body()
    payload = dict(instance)
    name = payload.pop("@requestFormat", None)
    if not isinstance(name, str):
        return InvalidRequest("each instance must include a string @requestFormat").to_body()
    route = targets.get(name)
    if route is None:
        return InvalidRequest(f"no handler registered for @requestFormat: {name}").to_body()
    if "stream" in payload:
        logger.warning("ignoring an instance's stream field: the predict route does not stream")
        payload["stream"] = False
    method = "POST" if "POST" in (route.methods or ()) else "GET"
    status, body = await _call(request, route.path, method, json.dumps(payload).encode())
    logger.debug("prediction via %s %s: %d", method, route.path, status)
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")


async def _call(request: Request, path: str, method: str, body: bytes) -> tuple[int, bytes]:
    """Run one request through the whole app in-process: the status and the body it answers."""
    headers = [(k, v) for k, v in request.scope["headers"] if k not in (b"content-length", b"content-type")]
    headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {**request.scope, "method": method, "path": path, "raw_path": path.encode(), "headers": headers}
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await request.receive()  # then only the client's disconnect

    status, parts = 500, list[bytes]()

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))

    await request.app(scope, receive, send)
    return status, b"".join(parts)
