"""lfmserve.client: lfmserve's, llama-server's and llama-swap's HTTP API in a few typed calls that fail loudly.

Importing it loads httpx and numpy, never llama.cpp. See :class:`Client` (and :class:`AsyncClient`, the same
methods awaited); results are the records of :mod:`lfmserve.results`, errors the classes of :mod:`lfmserve.errors`.
"""

from __future__ import annotations

from ..results import (
    Capabilities,
    ChatResult,
    ContentDelta,
    FinalMessage,
    ListedModel,
    ReasoningDelta,
    RerankResult,
    Stats,
    StreamEvent,
    Timings,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from .client import AsyncClient, Client
from .media import AudioInput, ImageInput, audio_part, image_part

__all__ = [
    "AsyncClient",
    "AudioInput",
    "Capabilities",
    "ChatResult",
    "Client",
    "ContentDelta",
    "FinalMessage",
    "ImageInput",
    "ListedModel",
    "ReasoningDelta",
    "RerankResult",
    "Stats",
    "StreamEvent",
    "Timings",
    "ToolCall",
    "ToolCallDelta",
    "Usage",
    "audio_part",
    "image_part",
]
