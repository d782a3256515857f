"""``Client`` and ``AsyncClient``: lfmserve's (and llama-server's, and llama-swap's) HTTP API in a few typed calls.

Both drive the same sans-I/O operations (:mod:`.operations`); only the waiting differs. Errors are never
swallowed: an error answer raises the class lfmserve raised for it (``InvalidRequest`` with ``param``,
``ContextLengthExceeded`` with ``n_prompt_tokens`` / ``n_ctx``, ``AuthenticationFailed``, ``Unavailable``...),
no answer at all raises ``TransportError``, and a server that is loading (503) or not listening yet is asked
again with backoff, ``retries`` times at most and never past ``timeout``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx
import numpy as np
import numpy.typing as npt

from ..errors import LfmError, TransportError, Unavailable
from ..results import Capabilities, ChatResult, ListedModel, RerankResult, StreamEvent
from . import operations
from .calls import Call, Operation, Reply
from .events import ChatStreamReader
from .media import AudioInput, ImageInput
from .payloads import ChatBody, chat_body
from .retry import Backoff, RetryableFailure, body_of, judged, transport_failure

T = TypeVar("T")

#: A conversation: OpenAI-shaped messages, or one user message's text.
Messages = Sequence[Mapping[str, Any]] | str


class _ClientBase:
    """What both clients share: the base URL, the headers, and the state their operations learn."""

    def __init__(self, base_url: str, api_key: str | None, model: str | None, timeout: float, retries: int) -> None:
        base = base_url.rstrip("/")
        #: The server's root: a trailing ``/v1`` is dropped, since the routes name their own prefix.
        self.base_url = base.removesuffix("/v1")
        self.timeout = timeout
        self.retries = retries
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeouts = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        self._state = operations.ClientState(model)

    def _request(self, http: httpx.Client | httpx.AsyncClient, call: Call) -> httpx.Request:
        return http.build_request(
            call.method, call.path, json=call.json, params=call.params, files=call.files, data=call.data
        )

    def _chat_body(
        self, messages: Messages, stream: bool, options: dict[str, Any], sampling: dict[str, Any]
    ) -> ChatBody:
        history = [{"role": "user", "content": messages}] if isinstance(messages, str) else messages
        return chat_body(history, model=self.model, stream=stream, sampling=sampling, **options)

    def _ready_error(self, timeout_s: float, last: LfmError | None) -> Unavailable:
        reason = f": {last.message}" if last is not None else ""
        return Unavailable(f"{self.base_url} was not ready after {timeout_s:g} s{reason}")


def _chat_options(
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: str | Mapping[str, Any] | None,
    response_format: Any,
    thinking: bool | None,
    images: Sequence[ImageInput],
    audio: Sequence[AudioInput],
) -> dict[str, Any]:
    return {
        "tools": tools,
        "tool_choice": tool_choice,
        "response_format": response_format,
        "thinking": thinking,
        "images": images,
        "audio": audio,
    }


class Client(_ClientBase):
    """Example::

    with Client("http://127.0.0.1:8080", model="lfm") as client:
        reply = client.chat("Describe this camera snapshot.", images=["snapshot.webp"], temperature=0.1)
        print(reply.content, reply.usage)
        vectors = client.embed(texts=["a person at the door"])
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        model: str | None = None,
        timeout: float = 600.0,
        retries: int = 6,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key, model, timeout, retries)
        self._http = httpx.Client(
            base_url=self.base_url, headers=self._headers, timeout=self._timeouts, transport=transport
        )

    def capabilities(self, model: str | None = None, *, refresh: bool = False) -> Capabilities:
        """What the model can do (cached after the first call; ``refresh`` asks the server again)."""
        return self._run(operations.capabilities(self._state, model, refresh))

    def chat(
        self,
        messages: Messages,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        response_format: Any = None,
        thinking: bool | None = None,
        images: Sequence[ImageInput] = (),
        audio: Sequence[AudioInput] = (),
        **sampling: Any,
    ) -> ChatResult:
        """One reply. ``response_format``: an OpenAI dict, a bare JSON schema, or a pydantic class (parsed into
        ``result.parsed``); ``images`` / ``audio`` join the last user message; ``sampling``: any body field."""
        options = _chat_options(tools, tool_choice, response_format, thinking, images, audio)
        return self._run(operations.chat(self._chat_body(messages, False, options, sampling)))

    def stream(
        self,
        messages: Messages,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        response_format: Any = None,
        thinking: bool | None = None,
        images: Sequence[ImageInput] = (),
        audio: Sequence[AudioInput] = (),
        **sampling: Any,
    ) -> Iterator[StreamEvent]:
        """The reply as events, the last a :class:`~lfmserve.results.FinalMessage`. Closing the iterator early
        (``break``, an exception) closes the connection, and the server stops generating."""
        options = _chat_options(tools, tool_choice, response_format, thinking, images, audio)
        body = self._chat_body(messages, True, options, sampling)
        return self._events(body)

    def embed(
        self, texts: Sequence[str] = (), images: Sequence[ImageInput] = (), dimensions: int | None = None
    ) -> npt.NDArray[np.float32]:
        """One row per text, then one per image (the server needs ``--embeddings``, and ``--mmproj`` for images)."""
        return self._run(operations.embed(self._state, texts, images, dimensions))

    def transcribe(self, audio: AudioInput, language: str | None = None, *, temperature: float | None = None) -> str:
        """The text spoken in a WAV / MP3 / FLAC recording; through the chat route where the server has no
        ``/v1/audio/transcriptions`` (older llama-server builds)."""
        return self._run(operations.transcribe(self._state, audio, language, temperature))

    def rerank(self, query: str, documents: Sequence[str], top_n: int | None = None) -> list[RerankResult]:
        """The documents by relevance, most relevant first (the server needs ``--rerank``)."""
        return self._run(operations.rerank(self._state, query, documents, top_n))

    def image_tokens(self, width: int, height: int) -> int:
        """Prompt tokens one image of this size costs (probed once per size)."""
        return self._run(operations.image_tokens(self._state, width, height))

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        return self._run(operations.tokenize(self._state, text, add_special, parse_special))

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self._run(operations.detokenize(self._state, tokens))

    def models(self) -> list[ListedModel]:
        """Every model the server lists (a router: all it can serve, loaded or not), loading none of them."""
        return self._run(operations.models())

    def health(self) -> bool:
        """True once the model is loaded; False while it loads. A server that does not answer raises."""
        return self._run(operations.health())

    def wait_until_ready(self, timeout: float | None = None) -> None:
        """Return once ``/health`` says ready; raise :class:`~lfmserve.errors.Unavailable` after ``timeout`` s."""
        timeout_s = self.timeout if timeout is None else timeout
        backoff, last = Backoff.starting_now(sys.maxsize, timeout_s), None
        while True:
            try:
                if self.health():
                    return
            except TransportError as exc:  # not listening yet
                last = exc
            delay = backoff.next_delay()
            if delay is None:
                raise self._ready_error(timeout_s, last)
            time.sleep(delay)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _run(self, operation: Operation[T]) -> T:
        try:
            call = next(operation)
            while True:
                response = self._send(call)
                call = operation.send(Reply(response.status_code, body_of(response)))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _events(self, body: ChatBody) -> Iterator[StreamEvent]:
        response = self._send(Call("POST", "/v1/chat/completions", json=body.json), stream=True)
        try:
            reader = ChatStreamReader(body.parse_as)
            for line in response.iter_lines():
                yield from reader.feed(line)
            yield from reader.finish()
        finally:
            response.close()

    def _send(self, call: Call, *, stream: bool = False) -> httpx.Response:
        backoff = Backoff.starting_now(self.retries, self.timeout)
        while True:
            try:
                response = self._http.send(self._request(self._http, call), stream=stream)
                if stream and response.status_code >= 400:
                    response.read()
                return judged(call, response)
            except httpx.TransportError as exc:
                failure = transport_failure(exc, self.base_url, call)
            except RetryableFailure as exc:
                failure = exc
            delay = backoff.next_delay()
            if delay is None:
                raise failure.error
            time.sleep(delay)


class AsyncClient(_ClientBase):
    """:class:`Client` for asyncio: the same methods, awaited; ``stream`` is an async iterator.

    Breaking out of ``async for`` leaves closing the stream to the garbage collector; wrap it in
    ``contextlib.aclosing(client.stream(...))`` to stop the server's generation at once.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        model: str | None = None,
        timeout: float = 600.0,
        retries: int = 6,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key, model, timeout, retries)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers, timeout=self._timeouts, transport=transport
        )

    async def capabilities(self, model: str | None = None, *, refresh: bool = False) -> Capabilities:
        return await self._run(operations.capabilities(self._state, model, refresh))

    async def chat(
        self,
        messages: Messages,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        response_format: Any = None,
        thinking: bool | None = None,
        images: Sequence[ImageInput] = (),
        audio: Sequence[AudioInput] = (),
        **sampling: Any,
    ) -> ChatResult:
        options = _chat_options(tools, tool_choice, response_format, thinking, images, audio)
        return await self._run(operations.chat(self._chat_body(messages, False, options, sampling)))

    def stream(
        self,
        messages: Messages,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        response_format: Any = None,
        thinking: bool | None = None,
        images: Sequence[ImageInput] = (),
        audio: Sequence[AudioInput] = (),
        **sampling: Any,
    ) -> AsyncIterator[StreamEvent]:
        options = _chat_options(tools, tool_choice, response_format, thinking, images, audio)
        return self._events(self._chat_body(messages, True, options, sampling))

    async def embed(
        self, texts: Sequence[str] = (), images: Sequence[ImageInput] = (), dimensions: int | None = None
    ) -> npt.NDArray[np.float32]:
        return await self._run(operations.embed(self._state, texts, images, dimensions))

    async def transcribe(
        self, audio: AudioInput, language: str | None = None, *, temperature: float | None = None
    ) -> str:
        return await self._run(operations.transcribe(self._state, audio, language, temperature))

    async def rerank(self, query: str, documents: Sequence[str], top_n: int | None = None) -> list[RerankResult]:
        return await self._run(operations.rerank(self._state, query, documents, top_n))

    async def image_tokens(self, width: int, height: int) -> int:
        return await self._run(operations.image_tokens(self._state, width, height))

    async def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        return await self._run(operations.tokenize(self._state, text, add_special, parse_special))

    async def detokenize(self, tokens: Sequence[int]) -> str:
        return await self._run(operations.detokenize(self._state, tokens))

    async def models(self) -> list[ListedModel]:
        return await self._run(operations.models())

    async def health(self) -> bool:
        return await self._run(operations.health())

    async def wait_until_ready(self, timeout: float | None = None) -> None:
        timeout_s = self.timeout if timeout is None else timeout
        backoff, last = Backoff.starting_now(sys.maxsize, timeout_s), None
        while True:
            try:
                if await self.health():
                    return
            except TransportError as exc:  # not listening yet
                last = exc
            delay = backoff.next_delay()
            if delay is None:
                raise self._ready_error(timeout_s, last)
            await asyncio.sleep(delay)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _run(self, operation: Operation[T]) -> T:
        try:
            call = next(operation)
            while True:
                response = await self._send(call)
                call = operation.send(Reply(response.status_code, body_of(response)))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _events(self, body: ChatBody) -> AsyncIterator[StreamEvent]:
        response = await self._send(Call("POST", "/v1/chat/completions", json=body.json), stream=True)
        try:
            reader = ChatStreamReader(body.parse_as)
            async for line in response.aiter_lines():
                for event in reader.feed(line):
                    yield event
            for event in reader.finish():
                yield event
        finally:
            await response.aclose()

    async def _send(self, call: Call, *, stream: bool = False) -> httpx.Response:
        backoff = Backoff.starting_now(self.retries, self.timeout)
        while True:
            try:
                response = await self._http.send(self._request(self._http, call), stream=stream)
                if stream and response.status_code >= 400:
                    await response.aread()
                return judged(call, response)
            except httpx.TransportError as exc:
                failure = transport_failure(exc, self.base_url, call)
            except RetryableFailure as exc:
                failure = exc
            delay = backoff.next_delay()
            if delay is None:
                raise failure.error
            await asyncio.sleep(delay)
