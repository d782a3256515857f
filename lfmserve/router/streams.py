"""The resumable-stream routes on a router (llama-server's ``router_stream_get``, ``router_stream_delete`` and
``router_streams_lookup``): each goes to the child that holds the conversation, found in
:class:`~lfmserve.router.conversations.ConversationOwners`, never to every child.

- ``GET /v1/stream``: passed to the owning child and streamed back. While the owner's model still loads it is a
  503 (the session appears once the waiting request reaches the child); with no owner, or one that stopped, 404.
- ``DELETE /v1/stream``: passed to the owning child, and the conversation forgotten, which cancels its request if
  that still waits for the model (it then fails with a 400). Always 204.
- ``POST /v1/streams/lookup``: each child asked only about its own conversations, the answers joined; a body
  that cannot be read is an empty list.

The router's own calls to a child (stop, lookup) get 250 ms, as llama-server's do: the child is on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import urlencode

import httpx
from fastapi import FastAPI, Query, Request
from starlette.responses import JSONResponse, Response

from ..api.sse import until_disconnect
from ..api.streams import requested_conversations, required_conversation
from ..errors import InvalidRequest, NotFound, Unavailable
from .child import Child
from .conversations import ConversationOwners
from .instance import LOADING, Instance
from .proxy import Proxy

logger = logging.getLogger(__name__)
#: llama-server's ``STREAM_LOOKUP_TIMEOUT_MS``.
_CHILD_CALL_S = 0.25


def add_stream_routes(app: FastAPI, proxy: Proxy, owners: ConversationOwners) -> None:
    """The three routes, answered through the children that own the conversations."""

    @app.get("/v1/stream")
    async def replay(request: Request, conv_id: str = "", start: str = Query("", alias="from")) -> Response:
        conversation_id = required_conversation(conv_id)
        instance = owners.owner(conversation_id)
        if instance is None or _serving(instance) is None:
            if instance is not None and instance.status == LOADING:
                raise Unavailable("Stream owner model is loading, retry later")
            raise NotFound("Stream not found or expired")
        query = {"conv_id": conversation_id, **({"from": start} if start else {})}
        forwarded = proxy.forward(
            instance,
            method="GET",
            path="/v1/stream",
            query=urlencode(query),
            headers=list(request.headers.items()),
            body=b"",
            autoload=False,
        )
        return await until_disconnect(request, forwarded)

    @app.delete("/v1/stream")
    async def stop(conv_id: str = "") -> Response:
        conversation_id = required_conversation(conv_id)
        instance = owners.owner(conversation_id)
        child = None if instance is None else _serving(instance)
        if child is not None:
            with contextlib.suppress(httpx.HTTPError):  # the child logs its own miss
                await proxy.ask(
                    child, "DELETE", "/v1/stream", params={"conv_id": conversation_id}, timeout_s=_CHILD_CALL_S
                )
        elif instance is not None:
            logger.info(
                "stop of conversation %s while %s loads: its request is cancelled", conversation_id, instance.name
            )
        else:
            logger.warning("stop of conversation %s, which no model holds", conversation_id)
        owners.forget(conversation_id)
        return Response(status_code=204, media_type="application/json")

    @app.post("/v1/streams/lookup")
    async def lookup(request: Request) -> JSONResponse:
        try:
            wanted = requested_conversations(await request.body())
        except InvalidRequest:
            wanted = []
        return JSONResponse(await _lookup_all(proxy, owners, wanted))


def _serving(instance: Instance) -> Child | None:
    return instance.child if instance.serving else None


async def _lookup_all(proxy: Proxy, owners: ConversationOwners, wanted: list[str]) -> list[dict[str, Any]]:
    """Each serving child asked about the conversations it holds (those of no serving child are left out)."""
    per_child: dict[Child, list[str]] = {}
    for conversation_id in wanted:
        instance = owners.owner(conversation_id)
        child = None if instance is None else _serving(instance)
        if child is not None:
            per_child.setdefault(child, []).append(conversation_id)
    answers = await asyncio.gather(*(_lookup(proxy, child, ids) for child, ids in per_child.items()))
    return [entry for entries in answers for entry in entries]


async def _lookup(proxy: Proxy, child: Child, conversation_ids: list[str]) -> list[dict[str, Any]]:
    """What ``child`` says of ``conversation_ids``; nothing when it does not answer in time or answers nonsense."""
    try:
        response = await proxy.ask(
            child,
            "POST",
            "/v1/streams/lookup",
            json_body={"conversation_ids": conversation_ids},
            timeout_s=_CHILD_CALL_S,
        )
        entries = response.json() if response.status_code == 200 else []
    except (httpx.HTTPError, ValueError):
        return []
    return [entry for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []
