"""The embedding routes over HTTP: OpenAI's client and shapes, llama-server's native ones, every input shape,
its errors with their status and message, and chat served beside embeddings by the same server."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from lfmserve.llama.model import NativeModel
from lfmserve.settings import Settings
from lfmserve.testing import image_bytes, wav_bytes
from tests.conftest import Running, ServerThread, needs_llama_server, start_llama_server, vl_settings


@pytest.fixture(scope="module")
def served(server_factory: Callable[..., ServerThread], tiny_llama_gguf: Path) -> ServerThread:
    settings = Settings.of(
        model=str(tiny_llama_gguf), alias="tiny", ctx_size=1024, parallel=2, threads=1, embeddings=True, pooling="mean"
    )
    return server_factory(settings)


@pytest.fixture(scope="module")
def model(tiny_llama_gguf: Path) -> Iterator[NativeModel]:
    m = NativeModel(tiny_llama_gguf)
    yield m
    m.close()


def _post(server: ServerThread, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def _vector(server: ServerThread, text: str, **options: Any) -> np.ndarray:
    data = _post(server, "/v1/embeddings", {"input": text, **options}).json()["data"]
    return np.array(data[0]["embedding"], dtype=np.float32)


def test_the_openai_client_gets_one_normalised_vector_per_input_with_exact_usage(
    served: ServerThread, model: NativeModel
) -> None:
    with openai.OpenAI(base_url=served.url + "/v1", api_key="unused") as client:
        texts = ["a person at the front door", "an empty driveway", "a cat"]
        reply = client.embeddings.create(model="tiny", input=texts, encoding_format="float")
        assert [item.index for item in reply.data] == [0, 1, 2] and reply.model == "tiny"
        vectors = [np.array(item.embedding) for item in reply.data]
        assert all(v.shape == (64,) and abs(np.linalg.norm(v) - 1) < 1e-5 for v in vectors)
        assert len({round(float(v[0]), 6) for v in vectors}) == 3  # three inputs, three vectors
        expected = sum(len(model.tokenize(t, add_special=True, parse_special=True)) for t in texts)
        assert reply.usage.prompt_tokens == reply.usage.total_tokens == expected
        one = client.embeddings.create(model="tiny", input=texts[1])  # the client asks for base64 by default
        np.testing.assert_allclose(np.array(one.data[0].embedding), vectors[1], atol=1e-6)


def test_input_shapes_are_llama_servers(served: ServerThread, model: NativeModel) -> None:
    ids = model.tokenize("a cat", add_special=True, parse_special=True)
    by_text = _vector(served, "a cat")
    np.testing.assert_allclose(_vector(served, ids), by_text, atol=1e-6)  # token ids are one input
    mixed = _post(served, "/v1/embeddings", {"input": ["a", 306, "cat"]}).json()  # a mixed array is one input
    assert len(mixed["data"]) == 1
    assert mixed["usage"]["prompt_tokens"] == len(model.tokenize("a", add_special=True, parse_special=True)) + 1 + len(
        model.tokenize("cat", add_special=False, parse_special=True)
    )
    many = _post(
        served,
        "/v1/embeddings",
        {"input": ["a cat", ids, {"content": [{"type": "text", "text": "a "}, {"type": "text", "text": "cat"}]}]},
    )
    vectors = [np.array(item["embedding"]) for item in many.json()["data"]]
    for vector in vectors:  # text, ids and content parts joined without a separator: the same input
        np.testing.assert_allclose(vector, by_text, atol=1e-5)


def test_base64_dimensions_and_normalisation(served: ServerThread) -> None:
    plain = _vector(served, "a red car")
    item = _post(served, "/v1/embeddings", {"input": "a red car", "encoding_format": "base64"}).json()["data"][0]
    assert item["encoding_format"] == "base64" and item["object"] == "embedding"
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4"), plain)
    cut = _vector(served, "a red car", dimensions=8)
    np.testing.assert_allclose(cut, plain[:8] / np.linalg.norm(plain[:8]), atol=1e-6)
    raw = _vector(served, "a red car", embd_normalize=-1)
    np.testing.assert_allclose(raw / np.linalg.norm(raw), plain, atol=1e-6)
    assert np.abs(raw).max() > 1.5 * np.abs(plain).max()  # not normalised


def test_native_routes_answer_bare_lists(served: ServerThread) -> None:
    plain = _vector(served, "a red car")
    for path, body in (
        ("/embedding", {"content": "a red car"}),
        ("/embeddings", {"input": "a red car"}),
        ("/v1/embeddings", {"content": "a red car"}),  # "content" is llama-server's field: a native answer
    ):
        reply = _post(served, path, body).json()
        assert isinstance(reply, list) and [item["index"] for item in reply] == [0]
        np.testing.assert_allclose(np.array(reply[0]["embedding"]), [plain], atol=1e-6)


def test_chat_is_served_beside_embeddings(served: ServerThread) -> None:
    reply = _post(served, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5})
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 5


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        ({}, '"input" or "content" must be provided', "input"),
        ({"input": []}, '"input" must not be empty', "input"),
        (
            {"input": "x", "encoding_format": "int8"},
            "The format to return the embeddings in. Can be either float or base64",
            "encoding_format",
        ),
        ({"input": [[5, 99999]]}, "Invalid token id 99999 (vocabulary has 475 tokens)", "input.0"),
        ({"input": "x", "dimensions": 65}, "dimensions must be between 1 and 64 for this model", "dimensions"),
        (
            {"input": [{"content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]},
            "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj",
            "input.0.content.0",
        ),
    ],
)
def test_bad_requests_get_llama_servers_messages(
    served: ServerThread, body: dict[str, Any], message: str, param: str
) -> None:
    reply = _post(served, "/v1/embeddings", body)
    error = reply.json()["error"]
    assert (error["message"], error.get("param")) == (message, param)
    assert reply.status_code == 400


def test_an_input_longer_than_a_micro_batch_is_a_400_naming_the_sizes(
    server_factory: Callable[..., ServerThread], tiny_llama_gguf: Path
) -> None:
    settings = Settings.of(
        model=str(tiny_llama_gguf), ctx_size=512, parallel=1, threads=1, ubatch_size=16, embeddings=True, pooling="cls"
    )
    small = server_factory(settings)
    reply = _post(small, "/v1/embeddings", {"input": [[5] * 17]})
    assert reply.status_code == 400
    assert reply.json()["error"]["message"] == (
        "input (17 tokens) is too large to process. increase the physical batch size (current batch size: 16)"
    )
    assert _post(small, "/v1/embeddings", {"input": [[5] * 16]}).status_code == 200


def test_pooling_none_is_native_only_with_a_row_per_token(
    server_factory: Callable[..., ServerThread], tiny_llama_gguf: Path, model: NativeModel
) -> None:
    settings = Settings.of(
        model=str(tiny_llama_gguf), ctx_size=512, parallel=1, threads=1, embeddings=True, pooling="none"
    )
    rows = server_factory(settings)
    reply = _post(rows, "/v1/embeddings", {"input": "a cat"})
    assert reply.status_code == 400
    assert reply.json()["error"]["message"] == (
        "Pooling type 'none' is not OAI compatible. Please use a different pooling type"
    )
    native = _post(rows, "/embedding", {"content": "a cat"}).json()
    n_tokens = len(model.tokenize("a cat", add_special=True, parse_special=True))
    assert np.array(native[0]["embedding"]).shape == (n_tokens, 64)


def test_a_server_without_embeddings_answers_501(tiny_server: ServerThread) -> None:
    for path in ("/v1/embeddings", "/embedding", "/embeddings"):
        reply = _post(tiny_server, path, {"input": "a cat"})
        assert reply.status_code == 501
        assert reply.json()["error"] == {
            "code": 501,
            "message": "This server does not support embeddings. Start it with `--embeddings`",
            "type": "not_supported_error",
        }


@pytest.mark.slow
@needs_llama_server
@pytest.mark.parametrize("which", ["gemma", "tiny-lfm2"])
def test_vectors_equal_llama_servers_side_by_side(
    which: str,
    server_factory: Callable[..., ServerThread],
    running: list[Running],
    gemma_gguf: Path,
    tiny_gguf: Path,
) -> None:
    path = gemma_gguf if which == "gemma" else tiny_gguf
    ours = server_factory(
        Settings.of(model=str(path), ctx_size=2048, parallel=2, threads=1, embeddings=True, pooling="mean")
    )
    theirs = start_llama_server(
        running, "-m", str(path), "-c", "2048", "-np", "2", "-t", "1", "--embeddings", "--pooling", "mean"
    )
    inputs: list[Any] = ["a person at the front door", "an empty driveway at night", [2, 100, 200], "x" * 100, "a cat"]

    def vectors(url: str, batch: list[Any]) -> tuple[list[np.ndarray], dict[str, int]]:
        reply = httpx.post(url + "/v1/embeddings", json={"input": batch}, timeout=120).json()
        return [np.array(item["embedding"]) for item in reply["data"]], reply["usage"]

    def cosine(x: np.ndarray, y: np.ndarray) -> float:
        return float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))

    theirs_alone = [vectors(theirs.url, [item])[0][0] for item in inputs]
    ours_alone = [vectors(ours.url, [item])[0][0] for item in inputs]
    assert min(map(cosine, ours_alone, theirs_alone)) >= 0.9999  # one input a decode: llama.cpp's same kernels
    ours_batch, usage = vectors(ours.url, inputs)
    assert usage == vectors(theirs.url, inputs)[1]
    # Packed into one decode, rows take other kernels (ggml's 4-row GEMM tiles instead of the GEMV for a
    # short input's rows): 0.9993 at worst on Gemma's Q4_K. llama-server's own batches of slots differ more.
    assert min(map(cosine, ours_batch, theirs_alone)) >= 0.999


# -- media in embedding inputs ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vl_served(server_factory: Callable[..., ServerThread], vl_gguf: Path, mmproj_gguf: Path) -> ServerThread:
    return server_factory(vl_settings(vl_gguf, mmproj_gguf, embeddings=True, pooling="mean"))


def _png(width: int, height: int, seed: int) -> str:
    return base64.b64encode(image_bytes(width, height, seed=seed, format="PNG")).decode()


def _wav(seconds: float) -> str:
    return base64.b64encode(wav_bytes(seconds)).decode()


def _image_input(data: str) -> dict[str, Any]:
    """Frigate's image input: the picture, then a newline (its older ``<__media__>\\n`` prompt)."""
    return {
        "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}},
            {"type": "text", "text": "\n"},
        ]
    }


def test_images_and_audio_are_embedded_with_llama_servers_token_counts(vl_served: ServerThread) -> None:
    image = _png(640, 480, seed=1)
    reply = _post(vl_served, "/v1/embeddings", {"input": [_image_input(image)]}).json()
    assert reply["usage"]["prompt_tokens"] == 1 + 234 + 2 + 1  # BOS, the image and its two wrapper tokens, "\n"
    vector = np.array(reply["data"][0]["embedding"])
    assert vector.shape == (64,) and abs(np.linalg.norm(vector) - 1) < 1e-5
    marker = httpx.get(vl_served.url + "/props").json()["media_marker"]
    native = {"prompt_string": f"{marker}\n", "multimodal_data": [image]}  # the same input, llama-server's other form
    same = np.array(_post(vl_served, "/embedding", {"content": [native]}).json()[0]["embedding"][0])
    np.testing.assert_allclose(same, vector, atol=1e-6)
    other = np.array(
        _post(vl_served, "/v1/embeddings", {"input": [_image_input(_png(640, 480, seed=2))]}).json()["data"][0][
            "embedding"
        ]
    )
    assert float(other @ vector) < 0.9999  # the pixels matter
    audio = {"content": [{"type": "input_audio", "input_audio": {"data": _wav(1), "format": "wav"}}]}
    mixed = _post(vl_served, "/v1/embeddings", {"input": ["a cat", audio, _image_input(image)]}).json()
    assert [item["index"] for item in mixed["data"]] == [0, 1, 2]
    np.testing.assert_allclose(np.array(mixed["data"][2]["embedding"]), vector, atol=1e-6)
    cat = _post(vl_served, "/v1/embeddings", {"input": "a cat"}).json()["usage"]["prompt_tokens"]
    assert mixed["usage"]["prompt_tokens"] == cat + (1 + 13) + 238  # the audio: BOS and 13 tokens a second


@pytest.mark.slow
@needs_llama_server
def test_media_vectors_equal_llama_servers_side_by_side(
    vl_served: ServerThread, running: list[Running], vl_gguf: Path, mmproj_gguf: Path
) -> None:
    theirs = start_llama_server(
        running,
        *("-m", str(vl_gguf), "--mmproj", str(mmproj_gguf), "-c", "4096", "-np", "1", "-t", "1"),
        *("--embeddings", "--pooling", "mean"),
    )
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_png(640, 480, seed=4)}"}}
    audio = {"type": "input_audio", "input_audio": {"data": _wav(1), "format": "wav"}}
    inputs = [
        {"content": [image, {"type": "text", "text": "\n"}]},
        {"content": [image]},
        {"content": [{"type": "text", "text": "front door "}, image, {"type": "text", "text": " at night"}]},
        {"content": [audio, {"type": "text", "text": "\n"}]},
    ]
    for item in inputs:
        ours, reference = (
            httpx.post(url + "/v1/embeddings", json={"input": [item]}, timeout=120).json()
            for url in (vl_served.url, theirs.url)
        )
        assert ours["usage"] == reference["usage"]
        x, y = np.array(ours["data"][0]["embedding"]), np.array(reference["data"][0]["embedding"])
        assert float(x @ y / np.linalg.norm(x) / np.linalg.norm(y)) >= 0.9999
