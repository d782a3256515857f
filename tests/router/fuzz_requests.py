"""What the router's fuzzer (``test_fuzz_router.py``) sends besides the schema's cases: bodies carrying every
sampler field with odd values, media parts of every kind (good and broken pictures, tones, clips, playlists, MP4s
whose boxes claim absurd sizes), the router's own routes, and a listener's address in every URL-shaped field.

Each strategy makes :class:`~tests.api.test_fuzz.WireRequest` values, so a failure names the exact bytes sent.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

from lfmserve.api.body import SamplingFields
from lfmserve.api.ollama.protocol import Options
from lfmserve.testing import image_bytes, wav_bytes
from tests.api.openai.test_video import _playlists
from tests.api.test_broken_media import _png_by_hand, _wav_header
from tests.api.test_fuzz import WireRequest
from tests.canary import Canary

#: The router's two children: a text model, and a vision model whose projector reads pictures, audio and video.
MODELS = ("text", "vision")
#: How a request names its model: mostly one of the two (twice as likely), else an Ollama form, a case the
#: router does not fold, an unknown name, or none (the case's own ``model``, if any).
MODEL_NAMES = st.sampled_from([*MODELS, *MODELS, "text:latest", "VISION", "nope", None])
#: The one repo of the fuzzed router's hub (it holds no file), and names a download or removal may be asked of.
HUB_REPO = "LiquidAI/Empty-GGUF"
HUB_NAMES = st.sampled_from([HUB_REPO, f"{HUB_REPO}:Q8_0", "LiquidAI/Missing-GGUF", "a b/c", "hf/x:", "/", "a//b"])
#: The model a media request names: mostly the one with a projector.
MEDIA_MODEL_NAMES = st.sampled_from(["vision", "vision", "vision", "text", "nope", None])
#: ``?autoload=``: absent, on, off, or nonsense (the router's default).
AUTOLOADS = st.sampled_from([None, None, "true", "1", "false", "0", "", "maybe"])
#: Every sampler field of the generation routes, and of Ollama's ``options`` (the model is named separately).
SAMPLER_FIELDS = sorted(set(SamplingFields.model_fields) - {"model"})
OLLAMA_OPTIONS = sorted(Options.model_fields)
#: The media marker the children are started with (``LLAMA_MEDIA_MARKER``), for ``/completion``'s media.
MEDIA_MARKER = "<__media__>"
#: Keys whose string values name something to fetch: each is planted with the canary's address.
URL_KEYS = frozenset({"url", "uri", "image_url", "video_url", "audio_url", "file_url"})
_MIME_TYPES = ["image/png", "image/jpeg", "video/mp4", "audio/wav", "application/vnd.apple.mpegurl", "text/plain"]


def json_request(method: str, target: str, body: Any) -> WireRequest:
    """JSON as Python writes it, NaN and the infinities included (``NaN``, ``Infinity``: not JSON, sent anyway)."""
    return WireRequest(method, target, {"Content-Type": "application/json"}, json.dumps(body, allow_nan=True).encode())


def odd_values() -> st.SearchStrategy[Any]:
    """Values a field is not meant to take, and the edges of those it is: huge and negative numbers, NaN, the
    infinities, wrong types, empty and nested containers."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.sampled_from([0, -1, -2, 1, 2**31 - 1, 2**31, 2**32, 2**63, -(2**63) - 1]),
        st.floats(),
        st.floats(min_value=0, max_value=1),
        st.text(max_size=8),
        st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=4)), max_size=3),
        st.dictionaries(st.text(max_size=4), st.integers(-5, 5), max_size=2),
    )


def sampling(fields: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """None of ``fields`` (so media reach decoding), or a few with odd values."""
    return st.one_of(st.just({}), st.dictionaries(st.sampled_from(fields), odd_values(), min_size=1, max_size=4))


def canary_urls(canary: Canary) -> list[str]:
    """The canary's address as a client might spell it: every form names 127.0.0.1 and its port."""
    port = canary.port
    return [
        canary.url("cat.png"),
        canary.url("clip.mp4"),
        f"https://127.0.0.1:{port}/tone.wav",
        f"HTTP://127.0.0.1:{port}/upper",
        f"http://localhost:{port}/named",
        f"http://127.1:{port}/short",
        f"http://2130706433:{port}/decimal",
        f"http://0x7f000001:{port}/hex",
        f"http://[::ffff:127.0.0.1]:{port}/mapped",
        f"http://user:secret@127.0.0.1:{port}/userinfo",
        f"http://127.0.0.1:{port}#@example.com/fragment",
    ]


def plant(value: Any, url: str) -> Any:
    """``value`` with ``url`` in every URL-shaped field, at any depth."""
    if isinstance(value, dict):
        return {k: url if k in URL_KEYS and isinstance(v, str) else plant(v, url) for k, v in value.items()}
    if isinstance(value, list):
        return [plant(item, url) for item in value]
    return value


def good_media(clip: bytes) -> list[tuple[str, bytes]]:
    """Media each child with a projector reads, with their types: pictures, a tone, a clip."""
    return [
        ("image/png", image_bytes(40, 24, seed=1, format="PNG")),
        ("image/jpeg", image_bytes(24, 40, seed=2)),
        ("image/webp", image_bytes(16, 16, seed=3, format="WEBP")),
        ("audio/wav", wav_bytes(0.5)),
        ("video/mp4", clip),
    ]


def broken_media(canary: Canary, clip: bytes) -> list[bytes]:
    """Broken or hostile media: cut short, a header claiming 30000x30000 pixels or 10 hours of samples, playlists
    and lists naming the canary."""
    return [
        image_bytes(24, 40, seed=2)[:100],
        clip[: len(clip) // 2],
        _png_by_hand(30000, 30000),
        _png_by_hand(0, 0),
        _wav_header(10 * 3600 * 16000 * 2),
        b"hello",
        b"",
        *_playlists(canary).values(),
    ]


def absurd_mp4s(clip: bytes) -> st.SearchStrategy[bytes]:
    """The clip with a box claiming an absurd size (32-bit: none, "64-bit follows", less than its header, past the
    file; or a 64-bit size past any file), or with any 32-bit field set to 2**32 - 1 (a sample count, a table's
    length)."""
    offsets = [at - 4 for kind in (b"ftyp", b"moov", b"mvhd", b"trak", b"mdia", b"stsd", b"stsz", b"stco", b"mdat")
               if (at := clip.find(kind)) >= 4]  # fmt: skip
    sizes = st.one_of(st.sampled_from([0, 1, 7, 8, 2**31, 2**32 - 1]), st.integers(0, 2**32 - 1))
    resized = st.builds(
        lambda at, size: clip[:at] + struct.pack(">I", size) + clip[at + 4 :], st.sampled_from(offsets), sizes
    )
    huge = st.builds(
        lambda at, size: (
            clip[:at] + struct.pack(">I", 1) + clip[at + 4 : at + 8] + struct.pack(">Q", size) + clip[at + 8 :]
        ),
        st.sampled_from(offsets),
        st.sampled_from([2**63 - 1, 2**64 - 1, 2**40]),
    )
    field = st.integers(0, len(clip) - 4).map(lambda at: clip[:at] + b"\xff\xff\xff\xff" + clip[at + 4 :])
    return st.one_of(resized, huge, field)


def media_sources(canary: Canary, clip: bytes) -> st.SearchStrategy[str]:
    """What a media part's URL or data holds: good media as a ``data:`` URI of their type, or a ``data:`` URI (of
    any type) or bare base64 of good, broken or random bytes, or the canary's address."""
    good = good_media(clip)
    data = st.one_of(
        st.sampled_from([blob for _, blob in good] + broken_media(canary, clip)),
        absurd_mp4s(clip),
        st.binary(max_size=64),
    )
    encoded = data.map(lambda blob: base64.b64encode(blob).decode())
    uris = st.builds(lambda mime, text: f"data:{mime};base64,{text}", st.sampled_from(_MIME_TYPES), encoded)
    typed = st.sampled_from([f"data:{mime};base64,{base64.b64encode(blob).decode()}" for mime, blob in good])
    return st.one_of(typed, uris, encoded, st.sampled_from(canary_urls(canary)))


def chat_parts(source: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    """OpenAI's and llama-server's content parts: a picture, audio (data or a URL), a video (``input_video`` or
    ``video_url``, data or a URL), text."""
    return st.one_of(
        st.builds(lambda url: {"type": "image_url", "image_url": {"url": url}}, source),
        st.builds(
            lambda key, value, fmt: {"type": "input_audio", "input_audio": {key: value, "format": fmt}},
            st.sampled_from(["data", "url"]),
            source,
            st.sampled_from(["wav", "mp3", "flac", ""]),
        ),
        st.builds(
            lambda kind, key, value: {"type": kind, kind: {key: value}},
            st.sampled_from(["input_video", "video_url"]),
            st.sampled_from(["data", "url"]),
            source,
        ),
        st.just({"type": "text", "text": "What is this?"}),
    )


def _named(body: dict[str, Any], model: str | None) -> dict[str, Any]:
    return body if model is None else {"model": model, **body}


def media_requests(source: st.SearchStrategy[str]) -> st.SearchStrategy[WireRequest]:
    """A user message with media, in every API family's shape, with sampler fields (none, or odd ones)."""
    parts = st.lists(chat_parts(source), min_size=1, max_size=3)
    ollama_images = st.lists(source, min_size=1, max_size=2)
    anthropic_source = st.one_of(
        st.builds(
            lambda mime, data: {"type": "base64", "media_type": mime, "data": data},
            st.sampled_from(_MIME_TYPES),
            source,
        ),
        st.builds(lambda url: {"type": "url", "url": url}, source),
    )
    return st.one_of(
        st.builds(
            lambda path, model, content, fields: json_request(
                "POST",
                path,
                _named({"messages": [{"role": "user", "content": content}], "max_tokens": 2, **fields}, model),
            ),
            st.sampled_from(["/v1/chat/completions", "/v1/chat/completions/input_tokens"]),
            MEDIA_MODEL_NAMES,
            parts,
            sampling(SAMPLER_FIELDS),
        ),
        st.builds(
            lambda model, image: json_request(
                "POST",
                "/v1/messages",
                _named(
                    {"max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "image", "source": image}]}]},
                    model,
                ),
            ),
            MEDIA_MODEL_NAMES,
            anthropic_source,
        ),
        st.builds(
            lambda model, url: json_request(
                "POST",
                "/v1/responses",
                _named(
                    {
                        "max_output_tokens": 2,
                        "input": [{"role": "user", "content": [{"type": "input_image", "image_url": url}]}],
                    },
                    model,
                ),
            ),
            MEDIA_MODEL_NAMES,
            source,
        ),
        st.builds(
            lambda model, images, stream, options: json_request(
                "POST",
                "/api/chat",
                _named(
                    {
                        "messages": [{"role": "user", "content": "What [img] is this?", "images": images}],
                        "stream": stream,
                        "options": {"num_predict": 2, **options},
                    },
                    model,
                ),
            ),
            MEDIA_MODEL_NAMES,
            ollama_images,
            st.booleans(),
            sampling(OLLAMA_OPTIONS),
        ),
        st.builds(
            lambda model, images, options: json_request(
                "POST",
                "/api/generate",
                _named(
                    {"prompt": "Describe", "images": images, "stream": False, "options": {"num_predict": 2, **options}},
                    model,
                ),
            ),
            MEDIA_MODEL_NAMES,
            ollama_images,
            sampling(OLLAMA_OPTIONS),
        ),
        st.builds(
            lambda model, items, fields: json_request(
                "POST",
                "/completion",
                _named(
                    {
                        "prompt": {"prompt_string": f"{MEDIA_MARKER} Describe", "multimodal_data": items},
                        "n_predict": 2,
                        **fields,
                    },
                    model,
                ),
            ),
            MEDIA_MODEL_NAMES,
            ollama_images,
            sampling(SAMPLER_FIELDS),
        ),
        st.builds(
            transcription,
            MEDIA_MODEL_NAMES,
            st.one_of(st.sampled_from([wav_bytes(0.5), b"RIFF"]), st.binary(max_size=64)),
        ),
    )


def transcription(model: str | None, audio: bytes) -> WireRequest:
    """``/v1/audio/transcriptions``: a multipart form of the model and a file."""
    boundary = "fuzzboundary7c1e"
    fields = [] if model is None else [f'Content-Disposition: form-data; name="model"\r\n\r\n{model}'.encode()]
    fields.append(
        b'Content-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n' + audio
    )
    body = (
        b"".join(b"--" + boundary.encode() + b"\r\n" + field + b"\r\n" for field in fields)
        + f"--{boundary}--\r\n".encode()
    )
    return WireRequest(
        "POST", "/v1/audio/transcriptions", {"Content-Type": f"multipart/form-data; boundary={boundary}"}, body
    )


#: A short generation on each family's route, to which sampler fields are added.
GENERATIONS: dict[str, dict[str, Any]] = {
    "/completion": {"prompt": "Once", "n_predict": 2},
    "/v1/completions": {"prompt": "Once", "max_tokens": 2},
    "/infill": {"input_prefix": "def f(", "input_suffix": "):", "n_predict": 2},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    "/v1/messages": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    "/v1/responses": {"input": "Hi", "max_output_tokens": 2},
}
#: Ollama's two generation routes take one body here: each ignores the other's field (``prompt``, ``messages``).
OLLAMA_GENERATION: dict[str, Any] = {"prompt": "Hi", "messages": [{"role": "user", "content": "Hi"}], "stream": False}
#: What the sweep sends each sampler field: wrong types, a fraction, NaN, the infinities, past int32 and int64.
ODD_VALUES: list[Any] = [None, True, -1, 0.5, 2**31, 2**63, -1e308, math.nan, math.inf, "x", [], {"a": 1}]


def sampler_sweep(*, every_value: bool) -> list[WireRequest]:
    """Every sampler field of the generation routes and every Ollama option, each in its own request (naming
    ``text``, so the field is the only odd thing in it): with one of :data:`ODD_VALUES` each, in turn, or with
    every one of them."""
    routes = sorted(GENERATIONS)
    sweep: list[WireRequest] = []
    for index, name in enumerate(SAMPLER_FIELDS + OLLAMA_OPTIONS):
        values = ODD_VALUES if every_value else [ODD_VALUES[index % len(ODD_VALUES)]]
        if index < len(SAMPLER_FIELDS):
            path = routes[index % len(routes)]
            bodies = [{**GENERATIONS[path], name: value} for value in values]
        else:
            path = ("/api/generate", "/api/chat")[index % 2]
            bodies = [{**OLLAMA_GENERATION, "options": {name: value}} for value in values]
        sweep += [json_request("POST", path, {"model": "text", **body}) for body in bodies]
    return sweep


def sampling_requests() -> st.SearchStrategy[WireRequest]:
    """Text generation on each family's route with a few sampler fields at odd values (Ollama's with odd options,
    and at times an odd ``keep_alive``)."""
    generation = st.builds(
        lambda path, model, odd: json_request("POST", path, _named({**GENERATIONS[path], **odd}, model)),
        st.sampled_from(sorted(GENERATIONS)),
        MODEL_NAMES,
        st.dictionaries(st.sampled_from(SAMPLER_FIELDS), odd_values(), min_size=1, max_size=3),
    )
    ollama = st.builds(
        lambda path, model, odd, keep_alive: json_request(
            "POST", path, _named({**OLLAMA_GENERATION, "options": odd, **keep_alive}, model)
        ),
        st.sampled_from(["/api/generate", "/api/chat"]),
        MODEL_NAMES,
        st.dictionaries(st.sampled_from(OLLAMA_OPTIONS), odd_values(), min_size=1, max_size=3),
        st.one_of(st.just({}), st.fixed_dictionaries({"keep_alive": odd_values()})),
    )
    return st.one_of(generation, ollama)


def json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8))
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=6,
    )


def router_requests(paths: list[str]) -> st.SearchStrategy[WireRequest]:
    """The router's own routes (loading and unloading, the lists, llama-swap's, ``/upstream/{model}/...`` onto
    the schema's ``paths``), Ollama's management and lifecycle requests, and paths no route has."""
    names = st.one_of(MODEL_NAMES, json_values())
    named = st.one_of(json_values(), st.fixed_dictionaries({"model": names}))
    path_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12).map(
        lambda text: quote(text, safe="/")
    )
    return st.one_of(
        st.builds(json_request, st.just("POST"), st.sampled_from(["/models/load", "/models/unload"]), named),
        st.builds(
            lambda path, raw: WireRequest("POST", path, {"Content-Type": "application/json"}, raw),
            st.sampled_from(["/models/load", "/models/unload", "/api/show", "/api/chat"]),
            st.binary(max_size=16),
        ),
        st.builds(
            lambda path, reload: WireRequest("GET", path + ("" if reload is None else f"?reload={reload}")),
            st.sampled_from(["/models", "/v1/models"]),
            st.sampled_from([None, "1", "0", "", "yes"]),
        ),
        st.builds(
            json_request,
            st.sampled_from(["POST", "DELETE"]),
            st.just("/models"),
            st.one_of(named, st.fixed_dictionaries({"model": HUB_NAMES})),
        ),
        st.builds(  # Ollama's pull and delete of a hub model, in Ollama's form of its name
            json_request,
            st.sampled_from(["POST", "DELETE"]),
            st.sampled_from(["/api/pull", "/api/delete"]),
            st.one_of(named, st.fixed_dictionaries({"model": HUB_NAMES.map(lambda name: f"hf.co/{name}")})),
        ),
        st.builds(
            WireRequest,
            st.sampled_from(["GET", "POST"]),
            st.sampled_from(["/running", "/unload", "/props", "/metrics", "/health", "/"]),
        ),
        st.builds(
            lambda method, model, rest, body: json_request(method, f"/upstream/{model}{rest}", body),
            st.sampled_from(["GET", "POST", "DELETE"]),
            st.sampled_from([*MODELS, "nope"]),
            st.one_of(
                st.sampled_from(["", "/", "/health", "/props", "/v1/models", *paths]),
                path_text.map(lambda text: "/" + text),
            ),
            named,
        ),
        st.builds(
            lambda method, text: WireRequest(method, "/api/" + text),
            st.sampled_from(["GET", "POST", "DELETE", "PUT"]),
            path_text,
        ),
        st.builds(lambda method, text: WireRequest(method, "/" + text), st.sampled_from(["GET", "POST"]), path_text),
        st.builds(
            lambda path, model, keep_alive: json_request("POST", path, _named({"keep_alive": keep_alive}, model)),
            st.sampled_from(["/api/generate", "/api/chat", "/api/show", "/api/pull"]),
            MODEL_NAMES,
            st.one_of(st.sampled_from([0, "0", -1, "-1m", "5m", 0.5]), odd_values()),
        ),
    )
