"""Newline-delimited JSON streams (Ollama's ``application/x-ndjson``): one object per line, and an error that
happens after the answer has begun as a last ``{"error": "..."}`` line (the status line has gone out as 200)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

from ..errors import LfmError, RequestCancelled
from .sse import json_line

logger = logging.getLogger(__name__)
MEDIA_TYPE = "application/x-ndjson"


def ndjson(lines: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    """Stream ``lines``; a client that leaves ends the stream (and its generation) with nothing more written."""

    async def frames() -> AsyncIterator[bytes]:
        try:
            async for line in lines:
                yield json_line(line) + b"\n"
        except RequestCancelled:
            return
        except LfmError as exc:
            yield error_line(exc.message)
        except Exception as exc:  # a bug: the stream still ends with an error line, not a cut connection
            logger.exception("unexpected error in a stream")
            yield error_line(f"Internal server error: {type(exc).__name__}")

    return StreamingResponse(frames(), media_type=MEDIA_TYPE, headers={"X-Accel-Buffering": "no"})


def error_line(message: str) -> bytes:
    return json.dumps({"error": message}).encode() + b"\n"
