"""Images and audio over HTTP: the official ``openai`` client, the native routes, and a consumer written the way
Frigate's llama.cpp provider uses llama-server (snapshots with a JSON schema, image-token probes, transcription
through chat).

The media token counts are llama-server's for this llama.cpp build (docs/testing.md, "Tiny projector facts the
tests rely on"): a 640x480 image is 234 tokens plus ``<|image_start|>`` and ``<|image_end|>``; a tiled 1024x768
one is 6 tiles of 256, a 234-token thumbnail and 9 wrapper tokens; a second of audio at 16 kHz is 13 tokens and
no wrappers.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import threading
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from PIL import Image

from lfmserve.settings import Settings
from lfmserve.testing import image_bytes, wav_bytes
from tests.conftest import ServerThread, vl_settings

IMAGE_640 = 234 + 2
IMAGE_1024 = 6 * 256 + 234 + 9
AUDIO_PER_SECOND = {1: 13, 3: 38}


def picture(width: int, height: int, *, seed: int, format: str = "JPEG") -> bytes:
    return image_bytes(width, height, seed=seed, format=format)


def wav(seconds: float) -> bytes:
    return wav_bytes(seconds)


def data_uri(data: bytes, mime: str = "image/jpeg") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def image_part(data: bytes, mime: str = "image/jpeg") -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_uri(data, mime)}}


def audio_part(data: bytes) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": "wav"}}


@pytest.fixture(scope="module")
def vl_server(server_factory: Callable[..., ServerThread], vl_gguf: Path, mmproj_gguf: Path) -> ServerThread:
    return server_factory(
        Settings.of(model=str(vl_gguf), mmproj=str(mmproj_gguf), alias="tiny-vl", ctx_size=8192, parallel=2, threads=2)
    )


@pytest.fixture(scope="module")
def client(vl_server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=vl_server.url + "/v1", api_key="unused")


def _prompt_tokens(client: openai.OpenAI, content: list[dict[str, Any]]) -> int:
    reply = client.chat.completions.create(
        model="tiny-vl", messages=[{"role": "user", "content": content}], max_tokens=4, temperature=0
    )
    assert reply.choices[0].message.content and reply.usage is not None
    return reply.usage.prompt_tokens


# -- the openai client ---------------------------------------------------------------------------------


def test_openai_client_counts_images_and_audio_as_llama_server_does(client: openai.OpenAI) -> None:
    question = {"type": "text", "text": "Describe this."}
    text_only = _prompt_tokens(client, [question])
    assert _prompt_tokens(client, [image_part(picture(640, 480, seed=1)), question]) == text_only + IMAGE_640
    assert _prompt_tokens(client, [image_part(picture(1024, 768, seed=2)), question]) == text_only + IMAGE_1024
    for seconds, tokens in AUDIO_PER_SECOND.items():
        assert _prompt_tokens(client, [audio_part(wav(seconds)), question]) == text_only + tokens
    both = [image_part(picture(640, 480, seed=3), "image/png"), audio_part(wav(1)), question]
    assert _prompt_tokens(client, both) == text_only + IMAGE_640 + AUDIO_PER_SECOND[1]


def test_the_same_image_again_gives_the_same_greedy_answer_and_other_pixels_another(client: openai.OpenAI) -> None:
    def answer(data: bytes) -> tuple[str, int]:
        reply = client.chat.completions.create(
            model="tiny-vl",
            messages=[{"role": "user", "content": [image_part(data), {"type": "text", "text": "What is it?"}]}],
            max_tokens=12,
            temperature=0,
        )
        assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
        return reply.choices[0].message.content or "", reply.usage.prompt_tokens_details.cached_tokens or 0

    first, cached_first = answer(picture(640, 480, seed=4))
    again, cached_again = answer(picture(640, 480, seed=4))
    assert again == first and first
    assert cached_again > cached_first + IMAGE_640 - 2  # the image came from the prompt cache
    assert answer(picture(640, 480, seed=5))[0] != first


def test_a_streamed_image_answer_ends_with_the_usage_of_the_whole_prompt(client: openai.OpenAI) -> None:
    question = {"type": "text", "text": "Describe this."}
    text_only = _prompt_tokens(client, [question])
    stream = client.chat.completions.create(
        model="tiny-vl",
        messages=[{"role": "user", "content": [image_part(picture(640, 480, seed=6)), question]}],
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == text_only + IMAGE_640


# -- remote and local sources -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("snapshots")
    (folder / "door.jpg").write_bytes(picture(640, 480, seed=11))
    return folder


@pytest.fixture(scope="module")
def origin(snapshots: Path) -> Iterator[str]:
    """A static file server on 127.0.0.1 holding the snapshots."""
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(snapshots))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_urls_on_loopback_and_files_under_media_path_with_the_flags_that_allow_them(
    server_factory: Callable[..., ServerThread], vl_gguf: Path, mmproj_gguf: Path, snapshots: Path, origin: str
) -> None:
    settings = vl_settings(vl_gguf, mmproj_gguf, media_fetch_private=True, media_path=str(snapshots))
    served = openai.OpenAI(base_url=server_factory(settings).url + "/v1", api_key="unused")
    question = {"type": "text", "text": "Describe this."}
    text_only = _prompt_tokens(served, [question])
    inline = _prompt_tokens(served, [image_part(picture(640, 480, seed=11)), question])
    assert inline == text_only + IMAGE_640
    for url in (f"{origin}/door.jpg", "file://door.jpg"):
        assert _prompt_tokens(served, [{"type": "image_url", "image_url": {"url": url}}, question]) == inline
    with pytest.raises(openai.BadRequestError, match="Failed to download image: HTTP 404"):
        _prompt_tokens(served, [{"type": "image_url", "image_url": {"url": f"{origin}/gone.jpg"}}, question])


def test_the_default_server_refuses_loopback_urls_and_file_urls(client: openai.OpenAI, origin: str) -> None:
    question = {"type": "text", "text": "Describe this."}
    with pytest.raises(openai.BadRequestError, match="resolves to 127.0.0.1, a loopback, private or link-local"):
        _prompt_tokens(client, [{"type": "image_url", "image_url": {"url": f"{origin}/door.jpg"}}, question])
    with pytest.raises(openai.BadRequestError, match="file:// URLs are not allowed unless --media-path"):
        _prompt_tokens(client, [{"type": "image_url", "image_url": {"url": "file://door.jpg"}}, question])


# -- native routes and discovery -----------------------------------------------------------------------


def test_props_and_models_report_the_projectors_modalities(vl_server: ServerThread) -> None:
    props = httpx.get(vl_server.url + "/props").json()
    assert props["modalities"] == {"vision": True, "audio": True, "video": True}
    entry = httpx.get(vl_server.url + "/v1/models").json()["data"][0]
    assert entry["architecture"]["input_modalities"] == ["text", "image", "audio"]


def test_completion_takes_multimodal_data_at_the_media_marker(vl_server: ServerThread) -> None:
    marker = httpx.get(vl_server.url + "/props").json()["media_marker"]
    body = {"n_predict": 4, "temperature": 0, "cache_prompt": False}
    text_only = httpx.post(vl_server.url + "/completion", json={**body, "prompt": "Describe this."}).json()
    prompt = {
        "prompt_string": f"{marker}Describe this.",
        "multimodal_data": [base64.b64encode(picture(640, 480, seed=7)).decode()],
    }
    reply = httpx.post(vl_server.url + "/completion", json={**body, "prompt": prompt}, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json()["tokens_evaluated"] == text_only["tokens_evaluated"] + IMAGE_640
    # without media the marker is text, as in llama-server; markers and media must otherwise pair up
    as_text = httpx.post(vl_server.url + "/completion", json={**body, "prompt": {"prompt_string": f"{marker}Hi"}})
    assert as_text.status_code == 200 and as_text.json()["tokens_evaluated"] > 1
    unpaired = {**prompt, "prompt_string": f"{marker}{marker}Describe both."}
    reply = httpx.post(vl_server.url + "/completion", json={**body, "prompt": unpaired})
    assert reply.status_code == 400
    assert reply.json()["error"]["message"] == "2 media markers in the prompt for 1 media items"


def test_input_tokens_and_apply_template_count_media_without_generating(vl_server: ServerThread) -> None:
    content = [image_part(picture(1024, 768, seed=8)), {"type": "text", "text": "Describe this."}]
    messages = [{"role": "user", "content": content}]
    counted = httpx.post(vl_server.url + "/v1/chat/completions/input_tokens", json={"messages": messages}).json()
    assert counted["object"] == "response.input_tokens"
    generated = httpx.post(
        vl_server.url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 1}, timeout=60
    ).json()
    assert counted["input_tokens"] == generated["usage"]["prompt_tokens"]
    text = [{"role": "user", "content": [{"type": "text", "text": "Describe this."}]}]
    text_only = httpx.post(vl_server.url + "/v1/chat/completions/input_tokens", json={"messages": text}).json()
    assert counted["input_tokens"] == text_only["input_tokens"] + IMAGE_1024
    marker = httpx.get(vl_server.url + "/props").json()["media_marker"]
    rendered = httpx.post(vl_server.url + "/apply-template", json={"messages": messages}).json()["prompt"]
    assert f"<|im_start|>user\n{marker}Describe this.<|im_end|>" in rendered


# -- a consumer written like Frigate's provider --------------------------------------------------------


class FrigateLikeProvider:
    """The calls Frigate's llama.cpp provider makes, as it makes them (httpx for its ``requests``)."""

    def __init__(self, base_url: str, model: str, provider_options: dict[str, Any]) -> None:
        self.provider = base_url
        self.model = model
        self.provider_options = provider_options
        self.last_usage: dict[str, Any] = {}
        self._baseline: int | None = None
        self.supports_vision = self.supports_audio = False

    def init_provider(self) -> None:
        models = httpx.get(f"{self.provider}/v1/models", timeout=10).json()
        entry = next(m for m in models["data"] if self.model in {m.get("id"), *m.get("aliases", [])})
        modalities = entry["architecture"]["input_modalities"]
        self.supports_vision, self.supports_audio = "image" in modalities, "audio" in modalities

    def _post_chat(self, payload: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        response = httpx.post(f"{self.provider}/v1/chat/completions", json=payload, timeout=timeout)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        self.last_usage = result.get("usage") or {}
        return result

    def send(self, prompt: str, images: list[tuple[bytes, str]], response_format: dict[str, Any]) -> str | None:
        content: list[dict[str, Any]] = [image_part(data, mime) for data, mime in images]
        content.append({"type": "text", "text": prompt})
        payload = {
            "model": self.model,
            "messages": [{"role": "user", "content": content}],
            **self.provider_options,
            "response_format": response_format,
        }
        choice = self._post_chat(payload)["choices"][0]
        return str(choice["message"]["content"].strip())

    def estimate_image_tokens(self, width: int, height: int) -> int:
        if self._baseline is None:
            self._baseline = self._probe([{"type": "text", "text": "."}])
        img = Image.new("RGB", (width, height), (128, 128, 128))
        buffer = io.BytesIO()
        img.save(buffer, format="JPEG", quality=60)
        with_image = self._probe([{"type": "text", "text": "."}, image_part(buffer.getvalue())])
        return max(1, with_image - self._baseline)

    def _probe(self, content: list[dict[str, Any]]) -> int:
        payload = {"model": self.model, "messages": [{"role": "user", "content": content}], "max_tokens": 1}
        return int(self._post_chat(payload)["usage"]["prompt_tokens"])

    def transcribe_via_chat(self, audio: bytes, language: str | None) -> str | None:
        prompt = "Transcribe the speech in this audio verbatim. Respond with the transcript only."
        if language:
            prompt += f" The speech is in language '{language}'."
        content = [{"type": "text", "text": prompt}, audio_part(audio)]
        payload = {"model": self.model, "messages": [{"role": "user", "content": content}], **self.provider_options}
        choice = self._post_chat(payload)["choices"][0]
        return str(choice["message"]["content"].strip()) or None


REVIEW_SCHEMA = {
    "type": "object",
    "properties": {
        "camera": {"enum": ["front_door", "driveway"]},
        "person": {"type": "boolean"},
        "threat_level": {"type": "integer", "minimum": 0, "maximum": 2},
    },
    "required": ["camera", "person", "threat_level"],
    "additionalProperties": False,
}


def test_frigate_like_provider_describes_snapshots_probes_tokens_and_transcribes(vl_server: ServerThread) -> None:
    provider = FrigateLikeProvider(vl_server.url, "tiny-vl", {"temperature": 0, "max_tokens": 120})
    provider.init_provider()
    assert provider.supports_vision and provider.supports_audio
    assert provider.estimate_image_tokens(640, 480) == IMAGE_640
    assert provider.estimate_image_tokens(1024, 768) == IMAGE_1024
    baseline = provider._probe([{"type": "text", "text": "Review the two snapshots."}])

    snapshots = [(picture(640, 480, seed=9), "image/jpeg"), (picture(1024, 768, seed=10, format="WEBP"), "image/webp")]
    response_format = {"type": "json_schema", "json_schema": {"name": "review", "schema": REVIEW_SCHEMA}}
    answer = provider.send("Review the two snapshots.", snapshots, response_format)
    assert answer is not None
    jsonschema.validate(json.loads(answer), REVIEW_SCHEMA)
    assert provider.last_usage["prompt_tokens"] == baseline + IMAGE_640 + IMAGE_1024

    provider.provider_options = {"temperature": 0, "max_tokens": 8}
    transcript = provider.transcribe_via_chat(wav(3.0), "en")
    assert transcript
    prompt = "Transcribe the speech in this audio verbatim. Respond with the transcript only."
    prompt += " The speech is in language 'en'."
    text_only = provider._probe([{"type": "text", "text": prompt}])
    assert provider.last_usage["prompt_tokens"] == text_only  # the probe was the last call
    assert provider.transcribe_via_chat(wav(3.0), "en") == transcript
    assert provider.last_usage["prompt_tokens"] == text_only + AUDIO_PER_SECOND[3]
