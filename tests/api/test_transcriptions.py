"""``/v1/audio/transcriptions`` over HTTP: the openai client, a form posted the way Frigate's provider posts it,
streaming, the prompt llama-server builds for LFM2 templates, and the errors with their status and message."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from lfmserve.settings import Settings
from lfmserve.testing import TinyProjector, image_bytes, wav_bytes, write_mmproj_gguf
from tests.conftest import ServerThread

#: A second of 16 kHz audio is 13 tokens (docs/testing.md, "Tiny projector facts the tests rely on").
AUDIO_TOKENS = {1: 13, 3: 38}


def wav(seconds: float) -> bytes:
    return wav_bytes(seconds)


@pytest.fixture(scope="module")
def served(server_factory: Callable[..., ServerThread], vl_gguf: Path, mmproj_gguf: Path) -> ServerThread:
    return server_factory(
        Settings.of(
            model=str(vl_gguf), mmproj=str(mmproj_gguf), alias="tiny-audio", ctx_size=4096, parallel=2, threads=1
        )
    )


def _post(server: ServerThread, data: dict[str, str], audio: bytes | None = None) -> httpx.Response:
    files = {"file": ("audio.wav", audio, "audio/wav")} if audio is not None else None
    return httpx.post(server.url + "/v1/audio/transcriptions", data=data, files=files, timeout=60)


def _chat_prompt_tokens(server: ServerThread, messages: list[dict[str, Any]]) -> int:
    body = {"messages": messages}
    return int(httpx.post(server.url + "/v1/chat/completions/input_tokens", json=body).json()["input_tokens"])


def test_a_form_like_frigates_gets_the_done_object_with_the_chat_prompts_usage(served: ServerThread) -> None:
    audio = wav(3)
    reply = _post(
        served, {"model": "tiny-audio", "response_format": "json", "language": "en", "max_tokens": "6"}, audio
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["type"] == "transcript.text.done" and isinstance(body["text"], str)
    # The chat llama-server builds for an LFM2 template: system "Perform ASR.", the language note, then the audio.
    system = {"role": "system", "content": "Perform ASR."}
    text_only = _chat_prompt_tokens(served, [system, {"role": "user", "content": " (language: en)"}])
    assert body["usage"] == {
        "type": "tokens",
        "input_tokens": text_only + AUDIO_TOKENS[3],
        "output_tokens": 6,
        "total_tokens": text_only + AUDIO_TOKENS[3] + 6,
        "input_tokens_details": {"cached_tokens": 0},
    }
    again = _post(served, {"response_format": "json", "language": "en", "max_tokens": "6"}, audio).json()
    assert again["usage"]["input_tokens_details"]["cached_tokens"] >= text_only + AUDIO_TOKENS[3] - 1  # audio cached


def test_the_openai_client_transcribes(served: ServerThread) -> None:
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="unused")
    result = client.audio.transcriptions.create(
        model="tiny-audio", file=("clip.wav", wav(1), "audio/wav"), extra_body={"max_tokens": "4", "temperature": "0"}
    )
    greedy = _post(served, {"max_tokens": "4", "temperature": "0"}, wav(1)).json()
    assert result.text == greedy["text"]


def test_text_verbose_json_and_a_prompt(served: ServerThread) -> None:
    audio = wav(1)
    fields = {"max_tokens": "4", "temperature": "0", "prompt": "Names: Ada."}
    done = _post(served, fields, audio).json()
    text = _post(served, {**fields, "response_format": "text"}, audio)
    assert text.headers["content-type"].startswith("text/plain") and text.text == done["text"]
    verbose = _post(served, {**fields, "response_format": "verbose_json", "language": "fr"}, audio).json()
    assert (verbose["task"], verbose["language"], verbose["duration"]) == ("transcribe", "fr", 1.0)
    user = {"role": "user", "content": "Names: Ada."}
    expected = _chat_prompt_tokens(served, [{"role": "system", "content": "Perform ASR."}, user]) + AUDIO_TOKENS[1]
    assert done["usage"]["input_tokens"] == expected


def test_a_stream_is_deltas_then_the_done_object_then_done(served: ServerThread) -> None:
    fields = {"max_tokens": "5", "temperature": "0", "stream": "true"}
    with httpx.stream(
        "POST",
        served.url + "/v1/audio/transcriptions",
        data=fields,
        files={"file": ("a.wav", wav(1), "audio/wav")},
        timeout=60,
    ) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert {e["type"] for e in events[:-1]} == {"transcript.text.delta"} and events[-1][
        "type"
    ] == "transcript.text.done"
    assert "".join(e["delta"] for e in events[:-1]) == events[-1]["text"]
    assert events[-1]["usage"]["output_tokens"] == 5
    whole = _post(served, {"max_tokens": "5", "temperature": "0"}, wav(1)).json()
    assert whole["text"] == events[-1]["text"]


@pytest.mark.parametrize(
    ("fields", "audio", "message", "param"),
    [
        ({"model": "x"}, None, "No input file found for transcription", "file"),
        (
            {"response_format": "srt"},
            wav(1),
            "response_format must be one of json, text, verbose_json (got 'srt')",
            "response_format",
        ),
        ({"temperature": "hot"}, wav(1), "Invalid value for 'temperature': 'hot'", "temperature"),
        ({"max_tokens": "-5"}, wav(1), "Invalid value for 'max_tokens': '-5'", "max_tokens"),
        (
            {},
            image_bytes(64, 64, seed=1, format="PNG"),
            "the file is not audio (an image can be described through chat)",
            "file",
        ),
        (
            {},
            b"not audio at all" * 20,
            "Failed to load image or audio file: the audio cannot be decoded (Format not recognised)",
            "file",
        ),
    ],
)
def test_bad_forms_are_400s_naming_the_field(
    served: ServerThread, fields: dict[str, str], audio: bytes | None, message: str, param: str
) -> None:
    reply = _post(served, fields, audio)
    assert reply.status_code == 400
    assert (reply.json()["error"]["message"], reply.json()["error"]["param"]) == (message, param)


def test_a_model_without_an_audio_encoder_answers_501(
    server_factory: Callable[..., ServerThread], vl_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    vision = write_mmproj_gguf(tmp_path_factory.mktemp("vision") / "mmproj.gguf", TinyProjector(kind="vision"))
    for projector in (str(vision), None):
        server = server_factory(Settings.of(model=str(vl_gguf), mmproj=projector, ctx_size=1024, parallel=1, threads=1))
        reply = _post(server, {}, wav(1))
        assert reply.status_code == 501
        assert reply.json()["error"] == {
            "code": 501,
            "message": "The current model does not support audio input.",
            "type": "not_supported_error",
        }
