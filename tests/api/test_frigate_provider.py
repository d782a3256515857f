"""The embedding and transcription calls of Frigate's llama.cpp provider, made the way it makes them, against one
``lfmserve --embeddings --mmproj`` process: text and snapshot embeddings padded to 768, and ``transcribe`` through
``/v1/audio/transcriptions`` (the provider falls back to chat only on a 404)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from lfmserve.testing import image_bytes, wav_bytes
from tests.conftest import LFMSERVE, Running, wait_healthy

EMBEDDING_DIM = 768


class FrigateLikeProvider:
    """``embed`` and ``transcribe`` as Frigate's provider writes them (httpx for its ``requests``)."""

    def __init__(self, base_url: str, model: str) -> None:
        self.provider, self.model = base_url, model

    def embed(self, texts: list[str], images: list[bytes]) -> list[np.ndarray]:
        inputs: list[dict[str, Any]] = [{"content": [{"type": "text", "text": text}]} for text in texts]
        for img in images:
            encoded = base64.b64encode(img).decode("utf-8")
            inputs.append(
                {
                    "content": [
                        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{encoded}"}},
                        {"type": "text", "text": "\n"},
                    ]
                }
            )
        response = httpx.post(
            f"{self.provider}/v1/embeddings",
            json={"model": self.model, "input": inputs, "encoding_format": "float"},
            timeout=120,
        )
        response.raise_for_status()
        out = []
        for item in response.json()["data"]:
            arr = np.array(item["embedding"], dtype=np.float32).flatten()
            arr = arr[:EMBEDDING_DIM] if arr.size > EMBEDDING_DIM else np.pad(arr, (0, EMBEDDING_DIM - arr.size))
            out.append(arr)
        return out

    def transcribe(self, audio: bytes, language: str | None = None) -> str | None:
        data = {"model": self.model, "response_format": "json"}
        if language:
            data["language"] = language
        response = httpx.post(
            f"{self.provider}/v1/audio/transcriptions",
            files={"file": ("audio.wav", audio, "audio/wav")},
            data=data,
            timeout=120,
        )
        assert response.status_code != 404, "the provider would fall back to chat"
        response.raise_for_status()
        text = response.json().get("text")
        return str(text).strip() or None if text else None


def test_embed_and_transcribe_against_one_process(running: list[Running], vl_gguf: Path, mmproj_gguf: Path) -> None:
    assert LFMSERVE is not None
    server = Running(
        [
            LFMSERVE,
            "-m",
            str(vl_gguf),
            "--mmproj",
            str(mmproj_gguf),
            "--embeddings",
            "--pooling",
            "mean",
            "-c",
            "4096",
            "-np",
            "2",
            "-t",
            "1",
            "-n",
            "12",
            "-a",
            "frigate-llm",
        ]
    )
    running.append(server)
    wait_healthy(server.url, server.process)
    provider = FrigateLikeProvider(server.url, "frigate-llm")

    jpeg, webp = (
        image_bytes(640, 480, seed=1),
        image_bytes(640, 480, seed=2, format="WEBP"),
    )  # WebP sent as is: no conversion to JPEG needed
    vectors = provider.embed(["a person at the front door", "a parcel on the porch"], [jpeg, webp])
    assert len(vectors) == 4 and all(v.shape == (EMBEDDING_DIM,) for v in vectors)
    assert all(abs(np.linalg.norm(v[:64]) - 1) < 1e-5 and not v[64:].any() for v in vectors)  # 64 wide, padded
    assert float(vectors[2] @ vectors[3]) < 0.9999  # two snapshots, two vectors
    again = provider.embed([], [jpeg])[0]
    np.testing.assert_allclose(again, vectors[2], atol=1e-6)

    transcript = provider.transcribe(wav_bytes(3.0, hz=220.0), language="en")
    assert transcript is None or isinstance(transcript, str)  # random weights: any text, maybe only spaces
    form = {"response_format": "json", "language": "en", "temperature": "0"}  # greedy: the same count every run
    files = {"file": ("audio.wav", wav_bytes(3.0, hz=220.0), "audio/wav")}
    usage = httpx.post(server.url + "/v1/audio/transcriptions", data=form, files=files, timeout=120).json()["usage"]
    prompt = [{"role": "system", "content": "Perform ASR."}, {"role": "user", "content": " (language: en)"}]
    text_only = httpx.post(server.url + "/v1/chat/completions/input_tokens", json={"messages": prompt}).json()
    assert usage["input_tokens"] == text_only["input_tokens"] + 38  # 3 s of audio (docs/testing.md, projector facts)
    assert usage["output_tokens"] == 12  # -n 12
    chat = httpx.post(
        server.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
    )
    assert chat.status_code == 200 and chat.json()["usage"]["completion_tokens"] == 3
    assert server.process.poll() is None
