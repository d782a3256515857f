"""The parts of llama-server's surface that stay off unless a flag turns them on: ``/tools`` (``--tools``, MCP
servers) and ``/cors-proxy`` (``--ui-mcp-proxy``, ``--agent``), which lfmserve does not serve yet. Both answer
llama-server's 403 for a disabled feature, on a server of one model and on the router alike, so a client (the
web UI's, llama-server's tests) tells "off here" from "no such route"."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

router = APIRouter()

#: llama-server's answer for a feature its flags left off (no ``code``, unlike its other errors).
DISABLED = {"error": {"message": "this feature is disabled", "type": "feature_disabled"}}


@router.api_route("/tools", methods=["GET", "POST"], include_in_schema=False)
@router.api_route("/cors-proxy", methods=["GET", "POST"], include_in_schema=False)
async def disabled() -> JSONResponse:
    return JSONResponse(DISABLED, status_code=403)
