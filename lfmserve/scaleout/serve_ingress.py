"""The HTTP-facing side of the Ray Serve application: an ASGI app that reads each request's body, computes its
routing key and forwards it to a model replica, streaming the answer back as the replica wrote it.

Why a hop of our own: Serve's proxy hands a deployment's router only the ASGI scope, never the body, so a
key computed from the conversation (:func:`~lfmserve.api.trace.route_key`) must be computed here and
passed on as the call's ``session_id``, which the request router reads. Status, headers and every SSE event
pass through unchanged; a failure before the replica answered is a 503 in the API's error shape (retried
first when the replica died: nothing was sent yet). ``GET /slots`` and ``GET /metrics`` ask every replica
(``handle.broadcast``) and merge the answers (:mod:`~lfmserve.scaleout.serve_merge`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from ray.exceptions import RayActorError
from ray.serve.exceptions import BackPressureError, ReplicaUnavailableError
from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from ..api.handlers import error_response
from ..api.trace import route_key
from ..errors import LfmError, Unavailable
from .serve_asgi import HttpRequest, HttpResponse, ResponseStart, read_body, write_response
from .serve_merge import merge_metrics, merge_slots

logger = logging.getLogger(__name__)

#: Answered by every replica and merged, rather than by one.
MERGED: dict[str, Callable[[list[HttpResponse]], HttpResponse]] = {"/slots": merge_slots, "/metrics": merge_metrics}
#: Tries of a request whose replica died before it answered (the router drops a dead replica meanwhile).
ATTEMPTS = 3
#: How long the replicas have to answer a merged request.
BROADCAST_TIMEOUT_S = 30.0


class Forwarder:
    """ASGI app forwarding to the model deployment behind ``model`` (methods ``forward`` and ``respond``)."""

    def __init__(self, model: DeploymentHandle[Any]) -> None:
        self._model = model

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets in llama-server's API
        request = HttpRequest.of(scope, await read_body(receive))
        merge = MERGED.get(request.path) if request.method == "GET" else None
        try:
            if merge is not None:
                answer = merge(await self._broadcast(request))
                await write_response(ResponseStart(answer.status, answer.headers), _once(answer.body), send)
                return
            start, chunks = await self._open(request, route_key(Headers(scope=scope), _json_object(request.body)))
        except LfmError as exc:
            await error_response(exc)(scope, receive, send)
            return
        await write_response(start, chunks, send)

    async def _open(self, request: HttpRequest, key: str) -> tuple[ResponseStart, AsyncIterator[bytes]]:
        """The replica's response start, and its body still to come; ``key`` picks the replica."""
        handle = self._model.options(stream=True)
        if key:
            handle = handle.options(session_id=key)  # what the request router reads
        for attempt in range(1, ATTEMPTS + 1):
            parts = cast(DeploymentResponseGenerator[Any], handle.forward.remote(request))
            try:
                start = await parts.__anext__()
            except (RayActorError, ReplicaUnavailableError) as exc:
                logger.warning(
                    "replica gone before answering %s %s (try %d): %s", request.method, request.path, attempt, exc
                )
                continue
            except BackPressureError as exc:
                raise Unavailable("all replicas are busy and their queues are full") from exc
            except StopAsyncIteration as exc:
                raise LfmError("the replica answered nothing") from exc
            assert isinstance(start, ResponseStart)
            return start, _body(parts)
        raise Unavailable("no replica could answer")

    async def _broadcast(self, request: HttpRequest) -> list[HttpResponse]:
        results = await self._model.broadcast("respond", request).results_async(
            timeout_s=BROADCAST_TIMEOUT_S, return_exceptions=True
        )
        for failure in (result for result in results if not isinstance(result, HttpResponse)):
            logger.warning("a replica did not answer %s: %s", request.path, failure)
        return [result for result in results if isinstance(result, HttpResponse)]


async def _body(parts: DeploymentResponseGenerator[Any]) -> AsyncIterator[bytes]:
    """The rest of a replica's streamed response; stopping early (the client left) cancels it there too."""
    try:
        async for part in parts:
            yield part
    except (RayActorError, ReplicaUnavailableError) as exc:
        logger.warning("replica gone while answering: %s", exc)  # the status is sent: the body ends short
    finally:
        parts.cancel()  # type: ignore[no-untyped-call,unused-ignore]


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


def _json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object for the routing key; anything else routes by nothing (the replica judges it)."""
    try:
        value = json.loads(body) if body[:1] in (b"{", b" ", b"\n", b"\t", b"\r") else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


async def _lifespan(receive: Receive, send: Send) -> None:
    """Nothing to start or stop: acknowledge both."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
