"""A model's lifecycle as Ollama's clients drive it, and the answers that need no model: ``keep_alive`` read
into seconds, the answer to an empty (load or unload) request, ``/api/pull`` of a model already here, the
probes, and the refusal of the management routes. Nothing here loads llama.cpp: the router uses it too."""

from __future__ import annotations

import re
import time
from typing import Any

from fastapi.responses import JSONResponse, PlainTextResponse, Response

from ...errors import InvalidRequest, NotFound
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


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}

KeepAlive = int | float | str


def keep_alive_seconds(value: KeepAlive | None) -> float | None:
    """``keep_alive`` in seconds: a number of seconds or a Go duration (``"5m"``, ``"1h30m"``, ``"-1"``); a negative
    value is "for ever" (returned as -1), None "the server's default"."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise _bad_keep_alive(value)
    if isinstance(value, int | float):
        return -1.0 if value < 0 else float(value)
    text = value.strip()
    sign, digits = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.removeprefix("+"))
    try:
        seconds = float(digits)  # a bare number is seconds, as Ollama reads it
    except ValueError:
        parts = _DURATION_PART.findall(digits)
        if not digits or "".join(number + unit for number, unit in parts) != digits:
            raise _bad_keep_alive(value) from None
        seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
    return -1.0 if sign < 0 and seconds > 0 else seconds


def _bad_keep_alive(value: object) -> InvalidRequest:
    message = f"invalid keep_alive {value!r}: give seconds, or a duration such as '5m'"
    return InvalidRequest(message, param="keep_alive")


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
