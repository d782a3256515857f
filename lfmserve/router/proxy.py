"""A request's way to its model's child and the answer's way back, unbuffered.

The body goes to the child as it came (the router reads the model's name from it, but never rewrites it); the
child's answer streams back as the child writes it: a token reaches the client when the child sends it, or, when
tokens come faster than one every few milliseconds, together with the others of the same few milliseconds. The
client's API key stays at the router: the child gets the router's own key for it.

When the child dies under a request: if nothing of the answer had arrived, the request is sent again to a fresh
child (the model loads again); once the answer has begun, a stream ends with an error event in the shape its
child's route writes (llama-server's ``error:`` event, Anthropic's ``event: error``, the Responses API's
``data: {"error": ...}``, Ollama's last ``{"error": ...}`` line), so no client hangs or reads a cut answer as whole.

When the router shuts down (:meth:`Proxy.drain`), new requests get a 503, and the running ones that outlast
``--shutdown-timeout`` end with one too: a stream with the same error event, ``the server is shutting down``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

import httpx
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from ..api.ndjson import MEDIA_TYPE as NDJSON
from ..api.ndjson import error_line
from ..api.server import settle
from ..api.sse import error_frame
from ..errors import LfmError, Unavailable
from .child import CHILD_HOST, Child
from .instance import Instance
from .pool import Pool
from .upstream import Upstream, UpstreamError, send

logger = logging.getLogger(__name__)
#: Headers that describe one connection, not the message: never passed on. ``expect`` too: the router has read the
#: whole body already, and a child's ``100 Continue`` would only delay its answer.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-authorization",
        "host",
        "expect",
    }
)
_CREDENTIALS = frozenset({"authorization", "x-api-key", "content-length"})
#: How long a child that refused a connection has to be seen exiting before the request is given up.
_EXIT_NOTICE_S = 2.0
_SHUTTING_DOWN = "the server is shutting down"
#: The least time between two writes of a streamed answer (SSE, NDJSON): tokens that come faster leave together,
#: each at most two gaps late, so the relay wakes once a gap instead of once a token (invisible to a reader, and
#: a model slower than a token a gap is relayed token by token as before).
_STREAM_GAP_S = 0.004
_SSE = "text/event-stream"
#: What a path keeps unescaped on its way to a child, RFC 3986's path characters: the path arrives decoded, so a
#: control character, a ``?`` or a ``#`` the client sent escaped is escaped again (``/upstream/m/%3F`` is ``/%3F``).
_PATH_SAFE = "/:@!$&'()*+,;=~"


class Proxy:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        #: The router's own calls to its children (:meth:`ask`): no timeout unless the call gives one. Relayed
        #: requests go on connections of their own (:mod:`.upstream`).
        self.client = httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_keepalive_connections=64))
        #: Shutting down: new requests get a 503 (:meth:`drain`).
        self._draining = False
        #: The drain's grace is over: what still runs ends with a 503.
        self._ended = False
        #: The requests not yet answered (waiting for their model or for their child's answer to begin), each with
        #: the deadline the drain moves to now once its grace is over.
        self._waiting: set[asyncio.Timeout] = set()
        #: The answers being relayed, closed under their relays once the grace is over.
        self._relaying: set[Upstream] = set()

    async def close(self) -> None:
        await self.client.aclose()

    async def drain(self, timeout_s: float) -> None:
        """Answer new requests with a 503, give the running ones ``timeout_s`` seconds, then end the rest with a
        503 "the server is shutting down": a request not yet answered with its body, a relayed stream with its
        error event. Their children see their clients leave, so they stop generating."""
        self._draining = True
        await settle(lambda: bool(self._waiting or self._relaying), timeout_s)
        self._ended = True
        now = asyncio.get_running_loop().time()
        for deadline in self._waiting:
            deadline.reschedule(now)
        # Closed under its relay, an answer's next read fails as a dead child's would: the relay sends the event.
        for upstream in self._relaying:
            upstream.close()

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
        answering. A 503 while the router shuts down."""
        retried = False
        async with self._until_drained():
            while True:
                child = await self.pool.acquire(instance, autoload=autoload, touch=method == "POST")
                target = quote(path, safe=_PATH_SAFE) + (f"?{query}" if query else "")
                try:
                    upstream = await send(CHILD_HOST, child.port, method, target, _for_child(headers, child), body)
                except UpstreamError as exc:
                    self.pool.release(instance)
                    if not retried and await _exited(child):
                        logger.warning("model %s stopped before answering; sending it to a new child", child.name)
                        retried = True
                        continue
                    raise Unavailable(f"model '{instance.name}' did not answer: {exc}") from exc
                except BaseException:
                    self.pool.release(instance)
                    raise
                break
        self._relaying.add(upstream)  # before the relay starts, so a drain that ends now cuts it too
        return _Relayed(
            self._relay(instance, upstream, path),
            lambda: self._end(instance, upstream),
            upstream.status_code,
            _for_client(upstream.headers),
        )

    @contextlib.asynccontextmanager
    async def _until_drained(self) -> AsyncIterator[None]:
        """Run the block, a request until its answer begins, but end it with a 503 once the drain's grace is over;
        refuse it while the router drains."""
        if self._draining:
            raise Unavailable(_SHUTTING_DOWN)
        try:
            async with asyncio.timeout(None) as deadline:
                self._waiting.add(deadline)
                try:
                    yield
                finally:
                    self._waiting.discard(deadline)
        except TimeoutError as exc:
            if not deadline.expired():
                raise
            raise Unavailable(_SHUTTING_DOWN) from exc

    async def _relay(self, instance: Instance, upstream: Upstream, path: str) -> AsyncIterator[bytes]:
        content_type = dict(upstream.headers).get("content-type", "")
        streamed = content_type.startswith((_SSE, NDJSON))
        try:
            async for chunk in upstream.body(_STREAM_GAP_S if streamed else 0.0):
                yield chunk
        except UpstreamError as exc:
            error: LfmError
            if self._ended:
                error = Unavailable(_SHUTTING_DOWN)
            else:
                logger.warning("model %s stopped while answering: %s", instance.name, exc)
                error = LfmError(f"model '{instance.name}' stopped while answering")
            yield _stream_error(content_type, path, error)
        finally:
            await self._end(instance, upstream)

    async def _end(self, instance: Instance, upstream: Upstream) -> None:
        """The answer is over, read or not: its connection to the child closes and its model is released, once."""
        if upstream not in self._relaying:
            return
        self._relaying.discard(upstream)
        upstream.close()
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


class _Relayed(StreamingResponse):
    """A child's answer streamed to the client, ended by ``end`` whatever happens: a client that leaves before the
    first chunk is read cancels the stream before the relay's own ``finally`` could run."""

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        end: Callable[[], Awaitable[None]],
        status_code: int,
        headers: dict[str, str],
    ) -> None:
        super().__init__(chunks, status_code=status_code, headers=headers)
        self._end = end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._end()


async def _exited(child: Child) -> bool:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(child.exited), _EXIT_NOTICE_S)
    return child.exited.done()


def _for_child(headers: list[tuple[str, str]], child: Child) -> list[tuple[str, str]]:
    kept = [(k, v) for k, v in headers if k.lower() not in _HOP_BY_HOP | _CREDENTIALS]
    return [*kept, ("authorization", f"Bearer {child.api_key}")]


def _for_client(headers: list[tuple[str, str]]) -> dict[str, str]:
    """The answer's headers for the client: a repeated one's values joined with ", " (one field, as RFC 9110 allows),
    hop-by-hop ones left out."""
    kept: dict[str, str] = {}
    for name, value in headers:
        if name not in _HOP_BY_HOP:
            kept[name] = f"{kept[name]}, {value}" if name in kept else value
    return kept


def _stream_error(content_type: str, path: str, error: LfmError) -> bytes:
    """The last frame of a relayed answer that ``error`` ends, as the child's route would write it (nothing for an
    answer that is not a stream): Ollama's ``{"error": ...}`` line, Anthropic's ``event: error``, the Responses
    API's ``data: {"error": ...}``, else llama-server's ``error:`` event."""
    if content_type.startswith(NDJSON):
        return error_line(error.message)
    if not content_type.startswith(_SSE):
        return b""
    route = path.removeprefix("/v1")
    responses = route.startswith("/responses")
    return error_frame(error, named_events=responses or route.startswith("/messages"), error_as_data=responses)
