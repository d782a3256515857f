"""``GET``/``POST /cors-proxy?url=URL`` with ``--ui-mcp-proxy`` or ``--agent``: the request passed on to URL and
its answer passed back (status, body, content type), as llama-server's proxy does for its web UI, which cannot
reach other sites' MCP servers from the browser itself. Headers named ``x-llama-server-proxy-header-NAME`` go
to URL as ``NAME``; no other header does (the caller's key, its cookies). Only http and https URLs with a host
and without a password in them; the target's answer streams through.

This fetches what its caller names, anything the server can reach: it is off unless asked for, and with
``--agent`` CORS admits local pages only (:mod:`lfmserve.settings.server`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from ..errors import InvalidRequest

router = APIRouter()

_PREFIX = "x-llama-server-proxy-header-"
#: What llama-server's proxy waits for the target at most (reading, writing).
TIMEOUT_S = 600.0
#: The target's headers passed back; the rest (its cookies, its CORS, the transfer framing) stay behind.
_PASSED_BACK = ("content-type", "content-encoding", "cache-control", "last-modified", "etag")


@router.api_route("/cors-proxy", methods=["GET", "POST"], include_in_schema=False)
async def cors_proxy(request: Request) -> StreamingResponse:
    target = _target(request.query_params.get("url", ""))
    headers = {
        name[len(_PREFIX) :]: value
        for name, value in request.headers.items()
        if name.lower().startswith(_PREFIX) and len(name) > len(_PREFIX)
    }
    client = httpx.AsyncClient(timeout=TIMEOUT_S, follow_redirects=False)
    try:
        sent = client.build_request(request.method, target, headers=headers, content=await request.body())
        answer = await client.send(sent, stream=True)
    except httpx.HTTPError as exc:
        await client.aclose()
        raise InvalidRequest(f"the proxy could not reach {target}: {exc}") from None

    async def body() -> AsyncIterator[bytes]:
        try:
            async for piece in answer.aiter_raw():
                yield piece
        finally:
            await answer.aclose()
            await client.aclose()

    passed = {name: answer.headers[name] for name in _PASSED_BACK if name in answer.headers}
    return StreamingResponse(body(), status_code=answer.status_code, headers=passed)


def _target(url: str) -> str:
    """``url`` if llama-server's proxy would fetch it, with its messages (a 400 here: the caller's mistake)."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise InvalidRequest("invalid target URL: missing host")
    if parts.password:
        raise InvalidRequest("authentication in target URL is not supported")
    if parts.scheme not in ("http", "https"):
        raise InvalidRequest(f"unsupported URL scheme in target URL: {parts.scheme}")
    return url if parts.path else parts._replace(path="/").geturl()
