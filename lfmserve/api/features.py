"""The parts of llama-server's surface that stay off unless a flag turns them on: ``/tools`` (``--tools``,
``--agent``) and ``/cors-proxy`` (``--ui-mcp-proxy``, ``--agent``). Off, each answers llama-server's 403 for a
disabled feature, on a server of one model and on the router alike, so a client (the web UI's, llama-server's
tests) tells "off here" from "no such route"; on, its module is imported and its routes come first."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse

from ..settings import AgentSettings

router = APIRouter()

#: llama-server's answer for a feature its flags left off (no ``code``, unlike its other errors).
DISABLED = {"error": {"message": "this feature is disabled", "type": "feature_disabled"}}


@router.api_route("/tools", methods=["GET", "POST"], include_in_schema=False)
@router.api_route("/cors-proxy", methods=["GET", "POST"], include_in_schema=False)
async def disabled() -> JSONResponse:
    return JSONResponse(DISABLED, status_code=403)


def add_agent_routes(app: FastAPI, settings: AgentSettings) -> Callable[[], None] | None:
    """The tools and the CORS proxy the flags turn on, then the 403 of those they leave off; what stops the tools'
    MCP servers, for the drain (None without them)."""
    close = None
    if settings.serves_tools:  # no tool code is imported without them
        from .tools import tools_router

        tools, close = tools_router(settings)
        app.include_router(tools)
    if settings.cors_proxy:  # nor httpx without the proxy
        from .cors_proxy import router as cors_proxy_router

        app.include_router(cors_proxy_router)
    app.include_router(router)
    return close
