"""An ASGI app driven in-process, one request at a time, as picklable records: what crosses a Ray Serve hop.

Ray Serve's handles carry Python objects between actors, not HTTP. The ingress turns the client's request
into an :class:`HttpRequest`; the replica runs it through the unchanged lfmserve app with
:class:`InProcessApp`, whose :meth:`~InProcessApp.stream` yields the response as a :class:`ResponseStart` and
then the body's chunks (each SSE event as the app sent it); the ingress writes them back with
:func:`write_response`. No Ray here, so it is tested without a cluster.

Example::

    app = InProcessApp(create_app(settings, load))
    await app.start()                       # the app's lifespan: the model starts loading
    async for part in app.stream(HttpRequest("GET", "/health")):
        ...                                 # ResponseStart(status=503, ...), then b'{"error": ...}'
    await app.stop()
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.lifespan.on import LifespanOn

logger = logging.getLogger(__name__)

Headers = tuple[tuple[bytes, bytes], ...]
#: How long an app may take to notice that its client has gone before its task is cancelled.
DISCONNECT_GRACE_S = 1.0


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """A whole HTTP request (its body read), as the ingress received it."""

    method: str
    path: str
    query_string: bytes = b""
    headers: Headers = ()
    body: bytes = b""
    client: tuple[str, int] | None = None

    @staticmethod
    def of(scope: Scope, body: bytes) -> HttpRequest:
        client = scope.get("client")
        return HttpRequest(
            method=scope["method"],
            path=scope["path"],
            query_string=scope.get("query_string", b""),
            headers=tuple((bytes(name), bytes(value)) for name, value in scope.get("headers", ())),
            body=body,
            client=(str(client[0]), int(client[1])) if client else None,
        )

    def scope(self, state: dict[str, object]) -> Scope:
        """The ASGI scope the app sees: uvicorn's HTTP/1.1 scope, with the lifespan's state."""
        return {
            "type": "http",
            # 2.3: the app learns of a gone client from receive(), which it listens to while streaming
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": self.method,
            "scheme": "http",
            "path": self.path,
            "raw_path": self.path.encode(),
            "query_string": self.query_string,
            "root_path": "",
            "headers": list(self.headers),
            "client": self.client,
            "server": None,
            "state": dict(state),
        }


@dataclass(frozen=True, slots=True)
class ResponseStart:
    """The status line and headers of a response; its body follows as ``bytes`` chunks."""

    status: int
    headers: Headers = ()


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A whole response (for the calls the ingress fans out to every replica and merges)."""

    status: int
    headers: Headers = ()
    body: bytes = b""

    def header(self, name: bytes) -> bytes | None:
        return next((value for key, value in self.headers if key.lower() == name), None)


ResponsePart = ResponseStart | bytes


@dataclass(slots=True)
class _Exchange:
    """One request's plumbing between the app's task and the consumer of :meth:`InProcessApp.stream`."""

    request: HttpRequest
    messages: asyncio.Queue[Message | None] = field(default_factory=asyncio.Queue)
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    body_sent: bool = False

    async def receive(self) -> Message:
        if not self.body_sent:
            self.body_sent = True
            return {"type": "http.request", "body": self.request.body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self.gone.is_set():
            raise OSError("the client has gone")  # as a server's send does (ASGI 2.4)
        await self.messages.put(message)


class InProcessApp:
    """An ASGI app with its lifespan run here, answering :class:`HttpRequest` records.

    ``headers`` are added to every response (the replica names itself in them).
    """

    def __init__(self, app: ASGIApp, *, headers: Headers = ()) -> None:
        self.app = app
        self._headers = headers
        config = uvicorn.Config(app, lifespan="on", log_config=None, access_log=False)
        self._lifespan = LifespanOn(config)

    async def start(self) -> None:
        """Run the app's startup; raises if it fails."""
        await self._lifespan.startup()
        if self._lifespan.should_exit:
            raise RuntimeError("the app's lifespan startup failed (see the log)")

    async def stop(self) -> None:
        await self._lifespan.shutdown()

    async def stream(self, request: HttpRequest) -> AsyncIterator[ResponsePart]:
        """The response to ``request``: a :class:`ResponseStart`, then the body's non-empty chunks.

        Closing the iterator early tells the app its client has gone (``http.disconnect``), as a server would,
        so a generation stops and frees its slot.
        """
        exchange = _Exchange(request)
        task = asyncio.create_task(self._run(exchange))
        try:
            while (message := await exchange.messages.get()) is not None:
                if message["type"] == "http.response.start":
                    yield ResponseStart(message["status"], _headers(message) + self._headers)
                elif message["type"] == "http.response.body":
                    if message.get("body"):
                        yield bytes(message["body"])
                    if not message.get("more_body", False):
                        break
            exchange.gone.set()  # the response is whole: what still listens for the client may end
            await task  # raises what the app raised
        finally:
            exchange.gone.set()
            if not task.done():
                await asyncio.wait([task], timeout=DISCONNECT_GRACE_S)
                task.cancel()

    async def respond(self, request: HttpRequest) -> HttpResponse:
        """The whole response to ``request``."""
        start, chunks = ResponseStart(500), []
        async for part in self.stream(request):
            if isinstance(part, ResponseStart):
                start = part
            else:
                chunks.append(part)
        return HttpResponse(start.status, start.headers, b"".join(chunks))

    async def _run(self, exchange: _Exchange) -> None:
        try:
            await self.app(exchange.request.scope(self._lifespan.state), exchange.receive, exchange.send)
        finally:
            exchange.messages.put_nowait(None)


def _headers(message: Message) -> Headers:
    return tuple((bytes(name), bytes(value)) for name, value in message.get("headers", ()))


async def read_body(receive: Receive) -> bytes:
    """The whole body of the request ``receive`` delivers."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b""  # the client left before sending it all
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def write_response(start: ResponseStart, chunks: AsyncIterator[bytes], send: Send) -> None:
    """Send a response: ``start``, then each chunk as it comes (an SSE event goes out the moment it arrives)."""
    await send({"type": "http.response.start", "status": start.status, "headers": list(start.headers)})
    async for chunk in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
