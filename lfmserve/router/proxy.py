"""A request's way to its model's child and the answer's way back, unbuffered.

The body goes to the child as it came (the router reads the model's name from it, but never rewrites it); the
child's answer streams back chunk by chunk as the child writes it, so a token reaches the client as soon as the
child sends it. The client's API key stays at the router: the child gets the router's own key for it.

When the child dies under a request: if nothing of the answer had arrived, the request is sent again to a fresh
child (the model loads again); once the answer has begun, a stream ends with an error event in its API's shape
(Anthropic's ``event: error``, OpenAI's ``data: {"error": ...}``, Ollama's last ``{"error": ...}`` line), so no
client hangs or reads a cut answer as whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.responses import Response, StreamingResponse

from ..api.ndjson import MEDIA_TYPE as NDJSON
from ..api.ndjson import error_line
from ..errors import LfmError, Unavailable
from .child import Child
from .instance import Instance
from .pool import Pool

logger = logging.getLogger(__name__)
#: Headers that describe one connection, not the message: never passed on.
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization", "host"}
)
_CREDENTIALS = frozenset({"authorization", "x-api-key", "content-length"})
#: How long a child that refused a connection has to be seen exiting before the request is given up.
_EXIT_NOTICE_S = 2.0


class Proxy:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        # No timeout: a generation may take as long as its max_tokens needs (the child has its own limits).
        self.client = httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_keepalive_connections=64))

    async def close(self) -> None:
        await self.client.aclose()

    async def forward(
        self,
        instance: Instance,
        *,
        method: str,
        path: str,
        query: str,
        headers: list[tuple[str, str]],
        body: bytes,
        autoload: bool,
    ) -> Response:
        """The child's answer to the request, streamed; retried once on a fresh child when the child died before
        answering."""
        retried = False
        while True:
            child = await self.pool.acquire(instance, autoload=autoload, touch=method == "POST")
            try:
                upstream = await self.client.send(
                    self.client.build_request(
                        method, f"{child.url}{path}", params=query, headers=_for_child(headers, child), content=body
                    ),
                    stream=True,
                )
            except httpx.TransportError as exc:
                self.pool.release(instance)
                if not retried and await _exited(child):
                    logger.warning("model %s stopped before answering; sending the request to a new child", child.name)
                    retried = True
                    continue
                raise Unavailable(f"model '{instance.name}' did not answer: {exc}") from exc
            except BaseException:
                self.pool.release(instance)
                raise
            return StreamingResponse(
                self._relay(instance, upstream, path),
                status_code=upstream.status_code,
                headers=_for_client(upstream.headers),
            )

    async def _relay(self, instance: Instance, upstream: httpx.Response, path: str) -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        except httpx.TransportError as exc:
            logger.warning("model %s stopped while answering: %s", instance.name, exc)
            event = _stream_error(upstream, path, f"model '{instance.name}' stopped while answering")
            if event:
                yield event
        finally:
            with contextlib.suppress(Exception):
                await upstream.aclose()
            self.pool.release(instance)

    async def get_json(self, child: Child, path: str) -> Any:
        """A GET the router itself makes to a child (its ``/v1/models`` entry)."""
        response = await self.ask(child, "GET", path)
        response.raise_for_status()
        return response.json()

    async def ask(
        self,
        child: Child,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        json_body: Any = None,
        timeout_s: float | None = None,
    ) -> httpx.Response:
        """A call the router itself makes to a child, with the child's key (no timeout unless ``timeout_s``)."""
        return await self.client.request(
            method,
            f"{child.url}{path}",
            params=params,
            json=json_body,
            headers={"Authorization": f"Bearer {child.api_key}"},
            timeout=timeout_s,
        )


async def _exited(child: Child) -> bool:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(child.exited), _EXIT_NOTICE_S)
    return child.exited.done()


def _for_child(headers: list[tuple[str, str]], child: Child) -> list[tuple[str, str]]:
    kept = [(k, v) for k, v in headers if k.lower() not in _HOP_BY_HOP | _CREDENTIALS]
    return [*kept, ("authorization", f"Bearer {child.api_key}")]


def _for_client(headers: httpx.Headers) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}


def _stream_error(upstream: httpx.Response, path: str, message: str) -> bytes:
    """The last event of a stream whose child died, in the stream's API shape (nothing for a non-stream answer)."""
    kind = upstream.headers.get("content-type", "")
    if kind.startswith(NDJSON):
        return error_line(message)
    if not kind.startswith("text/event-stream"):
        return b""
    if path.startswith("/v1/messages"):
        body = {"type": "error", "error": {"type": "api_error", "message": message}}
        return f"event: error\ndata: {json.dumps(body)}\n\n".encode()
    error = LfmError(message)
    body = {"error": {"code": error.status_code, "message": message, "type": error.error_type}}
    return f"data: {json.dumps(body)}\n\n".encode()
