"""llama-server's LoRA routes: ``GET /lora-adapters`` lists the loaded adapters and their server-wide scales,
``POST /lora-adapters`` sets those scales (requests with their own ``lora`` list still use theirs)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import ConfigDict, RootModel

from ..errors import InvalidRequest
from .body import LoraScale, parse_body
from .openapi import request_body
from .state import serving

router = APIRouter()


class LoraScales(RootModel[list[LoraScale]]):
    """``POST /lora-adapters``'s body: ``[{"id": 0, "scale": 0.5}, ...]``; adapters not listed go to 0."""

    model_config = ConfigDict(strict=True)


@router.get("/lora-adapters")
async def lora_adapters(request: Request) -> list[dict[str, Any]]:
    return [
        {"id": a.id, "path": a.path, "scale": a.scale, "task_name": a.task_name, "prompt_prefix": a.prompt_prefix}
        for a in serving(request).engine.adapters.infos()
    ]


@router.post("/lora-adapters", openapi_extra=request_body(LoraScales))
async def set_lora_adapters(request: Request) -> dict[str, bool]:
    raw = await request.body()
    try:
        body = parse_body(LoraScales, raw)
    except InvalidRequest:
        if not raw.lstrip().startswith(b"["):
            raise InvalidRequest("Request body must be an array") from None
        raise
    serving(request).engine.adapters.set_scales([(entry.id, entry.scale) for entry in body.root])
    return {"success": True}
