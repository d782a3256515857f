"""Routes that show and manage the server's slots: ``/slots``, ``/slots/{id}`` (save, restore, erase), ``/metrics``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..errors import InvalidRequest, NotFound, NotSupported, Unavailable
from .body import parse_body
from .monitoring import CONTENT_TYPE, slots_json
from .native.protocol import SlotFileRequest
from .openapi import request_body
from .state import app_state, serving

router = APIRouter()


@router.get("/slots")
async def slots(request: Request, fail_on_no_slot: bool = False) -> Any:
    if not app_state(request).settings.server.slots_endpoint:
        raise NotSupported("This server does not support slots endpoint.")
    engine = serving(request).engine
    if fail_on_no_slot and all(slot.busy for slot in engine.slots):
        raise Unavailable("no slot available")
    return slots_json(engine)


@router.post("/slots/{id_slot}", openapi_extra=request_body(SlotFileRequest))
async def slot_action(request: Request, id_slot: int, action: str = "") -> dict[str, Any]:
    save_path = app_state(request).settings.server.slot_save_path
    if not save_path:
        raise NotSupported("This server does not support slots action (start it with --slot-save-path).")
    engine = serving(request).engine
    if action == "erase":
        return {"id_slot": id_slot, "n_erased": await asyncio.to_thread(engine.clear_slot, id_slot)}
    if action not in ("save", "restore"):
        raise InvalidRequest(f"Invalid action '{action}': use save, restore or erase", param="action")
    filename = parse_body(SlotFileRequest, await request.body()).filename
    path = str(Path(save_path) / filename)
    t0 = time.perf_counter()
    if action == "save":
        n_saved, n_written = await asyncio.to_thread(engine.save_slot, id_slot, path)
        timings = {"save_ms": 1e3 * (time.perf_counter() - t0)}
        return {
            "id_slot": id_slot,
            "filename": filename,
            "n_saved": n_saved,
            "n_written": n_written,
            "timings": timings,
        }
    if not Path(path).is_file():
        raise NotFound(f"no saved slot named {filename}")
    n_restored, n_read = await asyncio.to_thread(engine.restore_slot, id_slot, path)
    timings = {"restore_ms": 1e3 * (time.perf_counter() - t0)}
    return {"id_slot": id_slot, "filename": filename, "n_restored": n_restored, "n_read": n_read, "timings": timings}


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    state = app_state(request)
    if not state.settings.server.metrics or state.metrics is None:
        raise NotSupported("This server does not support metrics endpoint (start it with --metrics).")
    reporter = state.metrics
    response = Response(reporter.render(), media_type=CONTENT_TYPE)
    # Spelt as llama-server spells it: clients that read headers into a plain dict look it up so (starlette's
    # ``headers=`` would lower-case it).
    response.raw_headers.append((b"Process-Start-Time-Unix", str(reporter.t_start).encode()))
    return response
