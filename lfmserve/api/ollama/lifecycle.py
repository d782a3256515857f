"""A model's lifecycle as Ollama's clients drive it, and the answers that need no model: the answer to an empty
(load or unload) request, ``/api/pull`` of a model already here, the probes, and the refusal of the management
routes (``keep_alive`` is read with the bodies, in :mod:`.protocol`). Nothing here loads llama.cpp: the router
uses it too."""

from __future__ import annotations

import time
from typing import Any

from fastapi.responses import JSONResponse, PlainTextResponse, Response

from ...errors import NotFound
from .cards import timestamp

#: Ollama's running-server probe answer (clients match the text).
RUNNING = "Ollama is running"


def is_probe(accept: str) -> bool:
    """Whether ``GET /`` with this Accept header is Ollama's probe. Ollama's clients send ``application/json`` (or,
    Go's, nothing); browsers, curl and generic HTTP libraries send ``text/html`` or ``*/*`` and get llama-server's
    answer: its web UI, or 404 with ``--no-ui`` (llama-server's own tests ask so)."""
    return "text/html" not in accept and "*/*" not in accept


def probe_answer(accept: str) -> Response:
    """``GET /`` when no web UI answered it: Ollama's probe text, or llama-server's 404."""
    if not is_probe(accept):
        raise NotFound("File Not Found: /")
    return PlainTextResponse(RUNNING)


def lifecycle_answer(model: str, reason: str, *, chat: bool) -> dict[str, Any]:
    """The answer to an empty request, which only loads (``load``) or unloads (``unload``) the model."""
    body: dict[str, Any] = {"message": {"role": "assistant", "content": ""}} if chat else {"response": ""}
    return {"model": model, "created_at": timestamp(time.time()), **body, "done": True, "done_reason": reason}


def pull_success(*, stream: bool) -> Response:
    """``/api/pull`` of a model already served: done at once (Home Assistant pulls any name it does not find
    verbatim in ``/api/tags``)."""
    if not stream:
        return JSONResponse({"status": "success"})
    return Response(b'{"status":"success"}\n', media_type="application/x-ndjson")


def management_refusal(route: str) -> str:
    return f"/api/{route} is not supported by lfmserve: it serves the models it was started with"
