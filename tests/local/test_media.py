"""The in-process API's images, audio and embeddings: the same inputs count, answer and embed as the server's."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import lfmserve
from lfmserve.errors import InvalidRequest, NotSupported
from lfmserve.testing import image_bytes, wav_bytes
from tests.conftest import ServerThread, post, vl_settings

QUESTION = "What is in the picture?"
#: A 640x480 picture is 234 tokens between <|image_start|> and <|image_end|>; a second of audio 13 tokens
#: (tests/api/openai/test_multimodal.py).
IMAGE_640 = 234 + 2
AUDIO_1S = 13
PICTURE = image_bytes(640, 480, seed=1)


@pytest.fixture(scope="module")
def vl_server(server_factory: Callable[..., ServerThread], vl_gguf: Path, mmproj_gguf: Path) -> ServerThread:
    return server_factory(vl_settings(vl_gguf, mmproj_gguf, threads=2, embeddings=True, pooling="mean"))


@pytest.fixture(scope="module")
def model(vl_gguf: Path, mmproj_gguf: Path) -> Iterator[lfmserve.Model]:
    with lfmserve.Model(vl_gguf, mmproj=mmproj_gguf, n_ctx=4096, n_threads=2, embeddings=True, pooling="mean") as m:
        yield m


def served(server: ServerThread, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = post(server, path, body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def data_part(data: bytes, kind: str = "image") -> dict[str, Any]:
    encoded = base64.b64encode(data).decode()
    if kind == "audio":
        return {"type": "input_audio", "input_audio": {"data": encoded, "format": "wav"}}
    return {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{encoded}"}}


def test_an_image_turn_counts_and_answers_as_the_server(model: lfmserve.Model, vl_server: ServerThread) -> None:
    text_only = model.chat().reply(QUESTION, max_tokens=1)
    chat = model.chat()  # the one slot's cache is this chat's from here on
    result = chat.reply(QUESTION, images=[PICTURE], temperature=0, max_tokens=4)
    content = [{"type": "text", "text": QUESTION}, data_part(PICTURE)]
    answer = served(
        vl_server,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": content}], "max_tokens": 4, "temperature": 0},
    )
    assert result.usage is not None and text_only.usage is not None
    assert result.usage.prompt_tokens == answer["usage"]["prompt_tokens"] == text_only.usage.prompt_tokens + IMAGE_640
    assert result.content == answer["choices"][0]["message"]["content"]
    assert chat.messages[0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": QUESTION},
            {"type": "image_url", "image_url": {"url": "lfmserve-media:0"}},
        ],
    }
    # the picture stays in the history: the next turn reuses all of the closed first turn
    closed = chat.rendered_tokens()
    assert chat.cached_tokens() == closed and sum(t < 0 for t in closed) == IMAGE_640 - 2
    chat.send("And then?", temperature=0, max_tokens=2)
    assert chat.last_turn is not None and chat.last_turn.n_cached_tokens == len(closed)
    assert chat.cached_tokens() == chat.rendered_tokens()


def test_bytes_a_path_and_a_pil_image_are_the_same_picture(model: lfmserve.Model, tmp_path: Path) -> None:
    path = tmp_path / "picture.jpg"
    path.write_bytes(PICTURE)
    forms: list[Any] = [PICTURE, path, str(path), Image.open(io.BytesIO(PICTURE))]
    prompts = []
    for form in forms:
        chat = model.chat()
        chat.send(QUESTION, images=[form], temperature=0, max_tokens=1)
        prompts.append(chat.rendered_tokens())
    assert all(prompt == prompts[0] for prompt in prompts)


def test_an_audio_turn_counts_as_the_server(model: lfmserve.Model, vl_server: ServerThread) -> None:
    clip = wav_bytes(1.0)
    result = model.chat().reply("Transcribe.", audio=[clip], temperature=0, max_tokens=2)
    content = [{"type": "text", "text": "Transcribe."}, data_part(clip, "audio")]
    answer = served(
        vl_server,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": content}], "max_tokens": 2, "temperature": 0},
    )
    text_only = model.chat().reply("Transcribe.", max_tokens=1)
    assert result.usage is not None and text_only.usage is not None
    assert result.usage.prompt_tokens == answer["usage"]["prompt_tokens"] == text_only.usage.prompt_tokens + AUDIO_1S
    assert result.content == answer["choices"][0]["message"]["content"]


def test_bad_media_is_the_servers_invalid_request_and_changes_nothing(
    model: lfmserve.Model, vl_server: ServerThread, tiny_gguf: Path
) -> None:
    chat = model.chat(system="Look.")
    for bad in (b"not an image", PICTURE[:200]):
        with pytest.raises(InvalidRequest) as info:
            chat.send(QUESTION, images=[PICTURE, bad])
        body = {"messages": [{"role": "user", "content": [data_part(bad)]}], "max_tokens": 1}
        error = post(vl_server, "/v1/chat/completions", body).json()["error"]
        assert (info.value.param, info.value.message) == ("images.1", error["message"])
    with pytest.raises(InvalidRequest, match="cannot read images.0 from '/nonexistent.png'") as info:
        chat.send(QUESTION, images=["/nonexistent.png"])
    assert info.value.param == "images.0"
    assert chat.messages == [{"role": "system", "content": "Look."}]
    chat.send(QUESTION, images=[PICTURE], temperature=0, max_tokens=1)  # still serving
    assert chat.last_turn is not None and chat.last_turn.n_generated == 1
    with lfmserve.Model(tiny_gguf, n_ctx=512, n_threads=1) as text_model:
        with pytest.raises(InvalidRequest, match="^image input is not supported - hint: ") as info:
            text_model.chat().send(QUESTION, images=[PICTURE])
        assert info.value.param == "images.0"
        with pytest.raises(NotSupported, match=r"Model\(path, embeddings=True\)"):
            text_model.embed(texts=["a"])


def test_embeddings_equal_the_servers(model: lfmserve.Model, vl_server: ServerThread) -> None:
    texts = ["hello world", "the ocean is wide"]
    vectors = model.embed(texts=texts, images=[PICTURE])
    answer = served(vl_server, "/v1/embeddings", {"input": [*texts, {"content": [data_part(PICTURE)]}]})
    expected = np.array([item["embedding"] for item in answer["data"]], dtype=np.float32)
    assert vectors.dtype == np.float32 and vectors.shape == expected.shape == (3, model.serving.embeddings.width)
    np.testing.assert_allclose(vectors, expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(model.embed(images=[PICTURE])[0], vectors[2], rtol=0, atol=1e-6)
