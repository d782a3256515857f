"""docs/python.md's rewrite of Frigate's llama.cpp provider, run as written against a real lfmserve.

The code block is read from docs/python.md and executed with stand-ins for Frigate's ``GenAIClient`` base class and
``interleave_images``, so the example cannot drift from the client it shows.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from lfmserve.errors import EngineError
from lfmserve.testing import image_bytes, wav_bytes
from tests.client.conftest import ALIAS, API_KEY, Target
from tests.conftest import WEATHER

#: The tiny test model's embedding width (Frigate indexes 768-wide vectors; a narrower model is an error).
TINY_WIDTH = 64
#: llama-server's stream error when a required call's output does not parse.
UNPARSED_CALL = "The model produced output that does not match the expected peg-native format"
PYTHON_MD = Path(__file__).resolve().parents[2] / "docs" / "python.md"


def provider_code() -> str:
    text = PYTHON_MD.read_text()
    after = text.split("Frigate's llama.cpp provider, rewritten on the client", 1)[1]
    match = re.search(r"```python\n(.*?)```", after, re.S)
    assert match is not None
    return match.group(1)


class GenAIClient:
    """Frigate's base class, as far as the provider uses it."""

    def __init__(self, base_url: str) -> None:
        self.genai_config = SimpleNamespace(base_url=base_url, api_key=API_KEY, model=ALIAS)
        self.timeout = 60
        self.provider_options = {"temperature": 0, "top_k": 1, "max_tokens": 6}
        self.provider = self._init_provider()  # type: ignore[attr-defined]


def interleave_images(prompt: str, images: list[bytes], captions: list[str] | None) -> list[Any]:
    return [prompt, *images]


def load_provider(url: str) -> Any:
    namespace: dict[str, Any] = {"GenAIClient": GenAIClient, "interleave_images": interleave_images}
    code = provider_code()
    assert len(code.splitlines()) < 100
    assert code.count("dimensions=768") == 1
    code = code.replace("dimensions=768", f"dimensions={TINY_WIDTH}")  # Frigate's index width; the tiny model's is 64
    exec(compile(code, str(PYTHON_MD), "exec"), namespace)
    return namespace["LlamaCppClient"](url)


def test_the_readme_provider_runs(target: Target) -> None:
    provider = load_provider(target.url)
    assert provider.provider == target.url
    described = provider._send("What is at the door?", [image_bytes(32, 32, seed=2)])
    assert isinstance(described, str) and described
    assert provider.estimate_image_tokens(64, 64) == provider.client.image_tokens(64, 64) > 0
    vectors = provider.embed(texts=["a cat"], images=[image_bytes(16, 16, seed=1)])
    assert [v.shape for v in vectors] == [(TINY_WIDTH,), (TINY_WIDTH,)]
    assert all(abs(float(np.linalg.norm(v)) - 1) < 1e-4 for v in vectors)
    assert isinstance(provider.transcribe(wav_bytes(0.5)), str | None)

    async def collect() -> list[Any]:
        messages = [{"role": "user", "content": "Weather?"}]
        try:
            return [
                item
                async for item in provider.chat_with_tools_stream(messages, tools=[WEATHER], tool_choice="required")
            ]
        finally:
            await provider.aclient.aclose()

    try:
        items = asyncio.run(collect())
    except EngineError as error:
        # llama-server samples the tiny model's answer freely (NO_FORCED_CALLS) and, for tool_choice required,
        # ends the stream with this 500 when the free text is not a call: the documented difference.
        assert target.kind == "llama-server" and str(error) == UNPARSED_CALL
        return
    finally:
        provider.client.close()
    kinds = [kind for kind, _ in items]
    assert kinds[-1] == "message" and "stats" in kinds
    message = items[-1][1]
    calls = message["tool_calls"] or []
    assert all(isinstance(call["arguments"], dict) for call in calls)
    if target.kind == "lfmserve":  # llama-server does not force the call (NO_FORCED_CALLS): its answer is sampled
        assert message["finish_reason"] == "tool_calls" and calls[0]["name"] == "get_weather"
