"""llama-server's resumable-stream routes: ``GET /v1/stream`` (replay, then follow), ``DELETE /v1/stream`` (stop)
and ``POST /v1/streams/lookup`` (the state of the sessions asked about).

The conversation id travels in the query string (``?conv_id=``), not the path: a router's ids end in a model name
(``conv::org/repo:Q8_0``) whose slashes a path would split. There is no route that lists sessions, so no caller
learns ids it was not given. The sessions are :mod:`~lfmserve.api.stream_sessions`'; a router answers the same
paths by asking the child that owns the conversation (:mod:`~lfmserve.router.streams`).

Example::

    curl -N 'localhost:8080/v1/stream?conv_id=conv-1&from=1024'    # the bytes from offset 1024, then live
    curl -X DELETE 'localhost:8080/v1/stream?conv_id=conv-1'         # 204, even for an unknown id
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..c_numbers import leading_int, unsigned_64
from ..errors import InvalidRequest, NotFound
from .body import Body
from .openapi import request_body
from .stream_sessions import StreamSessions

logger = logging.getLogger(__name__)
router = APIRouter()
#: ``std::stoull``'s bound: a number of this magnitude or more is out_of_range.
_ULL = 2**64


class StreamsLookupRequest(Body):
    """``POST /v1/streams/lookup``'s body, for the schema: the body itself is read as leniently as llama-server
    reads it (:func:`requested_conversations`)."""

    conversation_ids: list[str] = []


@router.get("/v1/stream")
async def replay(request: Request, conv_id: str = "", start: str = Query("", alias="from")) -> Response:
    """The session's bytes from offset ``from`` (default 0), then its live bytes until it finishes."""
    session = sessions(request).get(required_conversation(conv_id))
    if session is None:
        raise NotFound("Stream not found or expired")
    offset = parse_offset(start)
    if offset < session.dropped_bytes:
        raise InvalidRequest("Stream offset lost, please restart")
    return StreamingResponse(
        session.read_from(offset), media_type="text/event-stream", headers={"X-Accel-Buffering": "no"}
    )


@router.delete("/v1/stream")
async def stop(request: Request, conv_id: str = "") -> Response:
    """Stop the conversation's generation and forget its session: 204, whether there was one or not."""
    conversation_id = required_conversation(conv_id)
    streams = sessions(request)
    if not streams.close(conversation_id):
        logger.warning(
            "stop on unknown stream session, conv_id=%s matched nothing, %d live", conversation_id, len(streams)
        )
    return Response(status_code=204, media_type="application/json")


@router.post("/v1/streams/lookup", openapi_extra=request_body(StreamsLookupRequest))
async def lookup(request: Request) -> JSONResponse:
    """The sessions of the ids asked about (each with its ``<id>::<model>`` ones; the first 1024 ids): ``[{
    "conversation_id", "is_done", "total_bytes", "started_at", "completed_at"}]``."""
    wanted = requested_conversations(await request.body())
    return JSONResponse([session.describe() for session in sessions(request).matching(wanted)])


def sessions(request: Request) -> StreamSessions:
    """The app's sessions, from the lifespan state."""
    found: StreamSessions = request.state.streams
    return found


def required_conversation(conv_id: str) -> str:
    if not conv_id:
        raise InvalidRequest("Missing conversation id in path")
    return conv_id


def requested_conversations(body: bytes) -> list[str]:
    """The non-empty strings of the body's ``conversation_ids`` (anything else there, or no such list, is
    ignored); a body that is not JSON is a 400."""
    try:
        parsed: Any = json.loads(body)
    except ValueError as exc:
        raise InvalidRequest(f"invalid body: {exc}") from exc
    ids = parsed.get("conversation_ids") if isinstance(parsed, dict) else None
    return [item for item in ids if isinstance(item, str) and item] if isinstance(ids, list) else []


def parse_offset(text: str) -> int:
    """``from`` as llama-server reads it: absent is 0, a leading number counts (``12abc`` is 12), and a negative
    one wraps around to an offset past any end (so the stream waits for its end and sends nothing)."""
    if not text:
        return 0
    value = leading_int(text)  # llama-server reads it with std::stoull
    if value is None or abs(value) >= _ULL:
        raise InvalidRequest("Invalid 'from' offset")
    return unsigned_64(value)
