"""Every client method as one sans-I/O operation (see :mod:`.calls`), plus the state they share.

Routes: the OpenAI ones (``/v1/...``) exist on lfmserve, llama-server and llama-swap alike. llama-server's
native ones (``/props``, ``/tokenize``, ``/detokenize``) are reached on llama-swap through
``/upstream/{model}/...``: :class:`NativeRoutes` tries the plain path once, falls back on a 404, and keeps
what worked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import InvalidRequest, NotFound
from ..results import Capabilities, ChatResult, ListedModel, RerankResult
from .calls import Call, Operation, Reply
from .media import AudioInput, ImageInput, audio_bytes, audio_format, audio_part, blank_jpeg, image_part
from .payloads import ChatBody, chat_result
from .server_errors import error_from_body

#: Sampling fields of ``/props`` reported in :attr:`Capabilities.sampling_defaults`.
SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty")

#: What the chat fallback of :func:`transcribe` asks an audio chat model.
TRANSCRIBE_PROMPT = (
    "Write down exactly what is said in this recording, and nothing else. If nobody speaks, answer with nothing."
)


@dataclass(slots=True)
class ClientState:
    """What one client learns once and reuses: the native routes' prefix, capabilities, image-token costs."""

    model: str | None
    native_prefix: str | None = None
    capabilities: dict[str | None, Capabilities] = field(default_factory=dict)
    image_tokens: dict[tuple[int, int], int] = field(default_factory=dict)
    text_baseline_tokens: int | None = None


def native(state: ClientState, call: Call) -> Operation[Reply]:
    """A native llama-server route, directly or through llama-swap's ``/upstream/{model}`` (tried on a 404)."""
    if state.native_prefix is not None:
        return (yield _prefixed(call, state.native_prefix))
    reply = yield _prefixed(call, "", handles=404)
    if reply.status == 404 and state.model:
        upstream = f"/upstream/{state.model}"
        reply = yield _prefixed(call, upstream, handles=404)
        if reply.ok:
            state.native_prefix = upstream
    elif reply.ok:
        state.native_prefix = ""
    if not reply.ok:  # a 404 on both paths
        raise error_from_body(reply.status, reply.body)
    return reply


def _prefixed(call: Call, prefix: str, handles: int | None = None) -> Call:
    extra = frozenset({handles}) if handles is not None else frozenset()
    return replace(call, path=prefix + call.path, handles=call.handles | extra)


def capabilities(state: ClientState, model: str | None, refresh: bool) -> Operation[Capabilities]:
    """Model ids, context size, modalities, tools, reasoning, embeddings: ``/v1/models``, then ``/props``."""
    wanted = model or state.model
    if not refresh and wanted in state.capabilities:
        return state.capabilities[wanted]
    listing = (yield Call("GET", "/v1/models")).body
    entry = _model_entry(listing.get("data") or [] if isinstance(listing, dict) else [], wanted)
    props = (yield from native(state, Call("GET", "/props", params={"model": wanted} if wanted else None))).body
    embeddings = yield Call(
        "POST", "/v1/embeddings", json=_named({"input": ["."]}, wanted), handles=frozenset({400, 404, 501})
    )
    found = _capabilities(entry, props, embeddings_supported=embeddings.status in (200, 400))
    state.capabilities[wanted] = found
    return found


def models() -> Operation[list[ListedModel]]:
    """Every model ``/v1/models`` lists, with what the listing says of it."""
    listing = (yield Call("GET", "/v1/models")).body
    entries = listing.get("data") or [] if isinstance(listing, dict) else []
    return [_listed(entry) for entry in entries if isinstance(entry, dict)]


def _listed(entry: Mapping[str, Any]) -> ListedModel:
    modalities = (entry.get("architecture") or {}).get("input_modalities") or []
    status = entry.get("status") or {}
    args = [str(arg) for arg in status.get("args") or []]
    return ListedModel(
        id=str(entry.get("id")),
        aliases=tuple(str(a) for a in entry.get("aliases") or [] if a != entry.get("id")),
        status=status.get("value"),
        vision="image" in modalities,
        audio="audio" in modalities,
        n_ctx=_first_int((entry.get("meta") or {}).get("n_ctx"), _flag(args, "--ctx-size", "-c")),
    )


def _model_entry(entries: Sequence[Mapping[str, Any]], wanted: str | None) -> Mapping[str, Any]:
    for entry in entries:
        if wanted is None or wanted == entry.get("id") or wanted in (entry.get("aliases") or []):
            return entry
    served = [name for entry in entries for name in (entry.get("id"), *(entry.get("aliases") or [])) if name]
    raise NotFound(f"model {wanted!r} is not served here; the server has: {', '.join(map(str, served)) or 'none'}")


def _capabilities(entry: Mapping[str, Any], props: Mapping[str, Any], *, embeddings_supported: bool) -> Capabilities:
    modalities = (entry.get("architecture") or {}).get("input_modalities")
    prop_modalities = props.get("modalities") or {}
    args = [str(arg) for arg in (entry.get("status") or {}).get("args") or []]
    defaults = props.get("default_generation_settings") or {}
    params = defaults.get("params") or {}
    ids = [str(entry.get("id"))] + [str(alias) for alias in entry.get("aliases") or [] if alias != entry.get("id")]
    return Capabilities(
        model=ids[0],
        ids=tuple(ids),
        n_ctx=_first_int(
            (entry.get("meta") or {}).get("n_ctx"), _flag(args, "--ctx-size", "-c"), defaults.get("n_ctx")
        ),
        vision="image" in modalities if isinstance(modalities, list) else bool(prop_modalities.get("vision")),
        audio="audio" in modalities if isinstance(modalities, list) else bool(prop_modalities.get("audio")),
        tools="--jinja" in args or bool((props.get("chat_template_caps") or {}).get("supports_tools")),
        reasoning="enable_thinking" in str(props.get("chat_template") or ""),
        embeddings=embeddings_supported or "--embedding" in args or "--embeddings" in args,
        sampling_defaults={key: params[key] for key in SAMPLING_KEYS if key in params},
    )


def _flag(args: Sequence[str], *names: str) -> str | None:
    for i, arg in enumerate(args[:-1]):
        if arg in names:
            return args[i + 1]
    return None


def _first_int(*values: Any) -> int | None:
    for value in values:
        try:
            if value is not None and int(value) > 0:
                return int(value)
        except (TypeError, ValueError):
            continue
    return None


def _named(body: dict[str, Any], model: str | None) -> dict[str, Any]:
    return {**body, "model": model} if model else body


def chat(body: ChatBody) -> Operation[ChatResult]:
    reply = yield Call("POST", "/v1/chat/completions", json=body.json)
    return chat_result(reply.body, body.parse_as)


def embed(
    state: ClientState, texts: Sequence[str], images: Sequence[ImageInput], dimensions: int | None
) -> Operation[npt.NDArray[np.float32]]:
    """One row per text, then one per image (each image with a newline after it, as Frigate indexes them)."""
    inputs: list[Any] = [{"content": [{"type": "text", "text": text}]} for text in texts]
    inputs += [{"content": [image_part(image), {"type": "text", "text": "\n"}]} for image in images]
    if not inputs:
        raise InvalidRequest("embed needs at least one text or image", param="input")
    body: dict[str, Any] = {"input": inputs, "encoding_format": "float"}
    if dimensions is not None:
        body["dimensions"] = dimensions
    reply = yield Call("POST", "/v1/embeddings", json=_named(body, state.model))
    rows = sorted(reply.body["data"], key=lambda item: item["index"])
    vectors = np.array([row["embedding"] for row in rows], dtype=np.float32)
    return _cut(vectors, dimensions) if dimensions is not None else vectors


def _cut(vectors: npt.NDArray[np.float32], dimensions: int) -> npt.NDArray[np.float32]:
    """OpenAI's ``dimensions`` where the server ignores it (llama-server): the first ones, normalised again."""
    if vectors.shape[1] < dimensions:
        raise InvalidRequest(f"dimensions {dimensions} is more than the model's {vectors.shape[1]}", param="dimensions")
    if vectors.shape[1] == dimensions:
        return vectors
    cut = vectors[:, :dimensions]
    norms = np.linalg.norm(cut, axis=1, keepdims=True)
    return np.asarray(cut / np.where(norms > 0, norms, 1), dtype=np.float32)


def transcribe(
    state: ClientState, audio: AudioInput, language: str | None, temperature: float | None
) -> Operation[str]:
    """``/v1/audio/transcriptions``; on a server without that route (404), the chat route with the audio."""
    data = audio_bytes(audio)
    fields = {"response_format": "json", "language": language, "temperature": temperature}
    form = _named({key: str(value) for key, value in fields.items() if value is not None}, state.model)
    kind = audio_format(data)
    reply = yield Call(
        "POST",
        "/v1/audio/transcriptions",
        files={"file": (f"audio.{kind}", data, f"audio/{kind}")},
        data=form,
        handles=frozenset({404}),
    )
    if reply.status != 404:
        return str(reply.body["text"]).strip()
    prompt = TRANSCRIBE_PROMPT + (f" The language is {language}." if language else "")
    content = [{"type": "text", "text": prompt}, audio_part(data)]
    body = _named({"messages": [{"role": "user", "content": content}]}, state.model)
    if temperature is not None:
        body["temperature"] = temperature
    answer = chat_result((yield Call("POST", "/v1/chat/completions", json=body)).body)
    return (answer.content or "").strip()


def rerank(
    state: ClientState, query: str, documents: Sequence[str], top_n: int | None
) -> Operation[list[RerankResult]]:
    body = _named({"query": query, "documents": list(documents)}, state.model)
    if top_n is not None:
        body["top_n"] = top_n
    reply = yield Call("POST", "/v1/rerank", json=body)
    results = [
        RerankResult(int(r["index"]), float(r["relevance_score"]), documents[int(r["index"])])
        for r in reply.body["results"]
    ]
    return sorted(results, key=lambda result: -result.score)


def image_tokens(state: ClientState, width: int, height: int) -> Operation[int]:
    """What one image of this size costs in prompt tokens: a probe with it minus one without, kept per size."""
    if (width, height) in state.image_tokens:
        return state.image_tokens[(width, height)]
    text = {"type": "text", "text": "."}
    if state.text_baseline_tokens is None:
        state.text_baseline_tokens = yield from _prompt_tokens(state, [text])
    picture = image_part(blank_jpeg(width, height))
    with_image = yield from _prompt_tokens(state, [text, picture])
    tokens = with_image - state.text_baseline_tokens
    state.image_tokens[(width, height)] = tokens
    return tokens


def _prompt_tokens(state: ClientState, content: list[dict[str, Any]]) -> Operation[int]:
    body = _named({"messages": [{"role": "user", "content": content}], "max_tokens": 1}, state.model)
    reply = yield Call("POST", "/v1/chat/completions", json=body)
    return int(reply.body["usage"]["prompt_tokens"])


def tokenize(state: ClientState, text: str, add_special: bool, parse_special: bool) -> Operation[list[int]]:
    body = {"content": text, "add_special": add_special, "parse_special": parse_special}
    reply = yield from native(state, Call("POST", "/tokenize", json=body))
    return [int(token) for token in reply.body["tokens"]]


def detokenize(state: ClientState, tokens: Sequence[int]) -> Operation[str]:
    reply = yield from native(state, Call("POST", "/detokenize", json={"tokens": list(tokens)}))
    return str(reply.body["content"])


def health() -> Operation[bool]:
    """Whether the server answers ``/health`` with 200 (a 503 while the model loads is False, not an error)."""
    reply = yield Call("GET", "/health", handles=frozenset({503}), retry=False)
    return reply.ok
