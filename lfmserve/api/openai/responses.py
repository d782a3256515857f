"""OpenAI's response bodies and stream chunks, shaped as llama-server writes them.

A chat stream is llama-server's chunk sequence: the role, then one chunk per piece of content,
reasoning or tool call, the finish reason, an optional ``usage`` chunk (``choices: []``), ``timings``
on the last chunk (on every chunk with ``timings_per_token``), then ``[DONE]`` (added by the SSE framing).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...chat.logprobs import chat_logprobs, legacy_logprobs
from ...chat.output import AssistantOutputParser, OutputDelta, finish_reason
from ...chat.serving import Collected, Serving
from ...engine.records import EngineOutput, EngineRequest, TokenLogprob
from ..native.protocol import CompletionRequest
from ..native.responses import completion_result
from .protocol import ChatCompletionRequest


def completion_id(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(24).replace("-", "a").replace("_", "b")[:32]


def usage(out: EngineOutput, *more: EngineOutput) -> dict[str, Any]:
    """One generation's usage; with ``n`` choices, the completions of all of them over the one prompt."""
    completion = out.n_decoded + sum(other.n_decoded for other in more)
    return {
        "completion_tokens": completion,
        "prompt_tokens": out.n_prompt_tokens,
        "total_tokens": completion + out.n_prompt_tokens,
        "prompt_tokens_details": {"cached_tokens": out.n_cached_tokens},
    }


def model_list(serving: Serving, aliases: tuple[str, ...], tags: tuple[str, ...]) -> dict[str, Any]:
    """``GET /v1/models``: the one model served, in OpenAI's list and llama-server's ``models`` list."""
    entry = {
        "id": serving.model_name,
        "aliases": list(aliases),
        "tags": list(tags),
        "object": "model",
        "created": int(time.time()),
        "owned_by": "llamacpp",
        "architecture": {"input_modalities": input_modalities(serving), "output_modalities": ["text"]},
        "meta": serving.model.info.meta_json(serving.engine.n_ctx_slot),
    }
    capabilities = ["completion", "multimodal"] if serving.projector else ["completion"]
    card = {"name": serving.model_name, "model": serving.model_name, "type": "model", "capabilities": capabilities}
    return {"object": "list", "data": [entry], "models": [card]}


def input_modalities(serving: Serving) -> list[str]:
    """``text``, plus ``image`` and ``audio`` as the projector reads them (its ``clip.has_*_encoder``)."""
    modalities = serving.media.modalities
    return ["text", *(name for key, name in (("vision", "image"), ("audio", "audio")) if modalities[key])]


def _envelope(serving: Serving, cid: str, obj: str, created: int) -> dict[str, Any]:
    return {
        "created": created,
        "id": cid,
        "model": serving.model_name,
        "system_fingerprint": serving.options.fingerprint,
        "object": obj,
    }


# -- chat completions ------------------------------------------------------------------------------
#: A chat answer as prepared: the engine request and the parser of its output (one per choice).
Prepared = tuple[EngineRequest, AssistantOutputParser]


def chat_completion(
    serving: Serving,
    body: ChatCompletionRequest,
    prepared: Sequence[Prepared],
    results: Sequence[Collected],
    cid: str,
) -> dict[str, Any]:
    """The whole answer ``cid`` (its id), a choice per generation (``n``), each message split into
    content, reasoning and tool calls; usage counts every choice's tokens; timings and ``__verbose`` are the first
    generation's."""
    choices = [
        _choice(serving, body, parser, done, index)
        for index, ((_, parser), done) in enumerate(zip(prepared, results, strict=True))
    ]
    first = results[0]
    out: dict[str, Any] = {
        "choices": choices,
        **_envelope(serving, cid, "chat.completion", int(time.time())),
        "usage": usage(*(done.last for done in results)),
        "timings": first.last.timings.to_json(),
    }
    if serving.options.verbose if body.verbose is None else body.verbose:
        out["__verbose"] = completion_result(serving, body, prepared[0][0], first, first.last)
    return out


def _choice(
    serving: Serving, body: ChatCompletionRequest, parser: AssistantOutputParser, done: Collected, index: int
) -> dict[str, Any]:
    parsed = parser.parse(done.text)
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.reasoning:
        message["reasoning_content"] = parsed.reasoning
    if parsed.calls:
        message["tool_calls"] = [call.to_json() for call in parsed.calls]
    reason = _finish_reason(done.last, bool(parsed.calls))
    choice: dict[str, Any] = {"finish_reason": reason, "index": index, "message": message}
    if body.logprobs:
        choice["logprobs"] = _chat_logprobs(serving, body, done.logprobs)
    return choice


@dataclass(frozen=True, slots=True)
class StreamIds:
    """What every chunk of one answer shares (its id and time), and which choice a chunk belongs to."""

    cid: str = field(default_factory=lambda: completion_id("chatcmpl-"))
    created: int = field(default_factory=lambda: int(time.time()))
    index: int = 0


async def chat_chunks(
    serving: Serving,
    body: ChatCompletionRequest,
    parser: AssistantOutputParser,
    outputs: AsyncIterator[EngineOutput],
    ids: StreamIds | None = None,
    *,
    one_of_several: bool = False,
) -> AsyncIterator[dict[str, Any]]:
    """llama-server's chunk sequence: role, content deltas, finish, optional usage; timings last (and, with
    ``timings_per_token``, on the last chunk of each step). A prefill report (``return_progress``) is a role
    chunk with ``prompt_progress``. ``ids``: the answer's (None: new ones). ``one_of_several``: a choice whose
    usage :func:`choices_chunks` sends once for all."""
    own = not one_of_several
    ids = ids or StreamIds()
    cid, created = ids.cid, ids.created

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "choices": [{"finish_reason": finish, "index": ids.index, "delta": delta}],
            **_envelope(serving, cid, "chat.completion.chunk", created),
        }

    first, any_calls = True, False
    unsent: list[TokenLogprob] = []  # probabilities wait for a chunk while the parser holds text back
    async for out in outputs:
        if out.progress is not None:
            yield {**chunk({"role": "assistant", "content": None}), "prompt_progress": out.progress.to_json()}
            continue
        pending: list[dict[str, Any]] = []
        if first:
            pending.append(chunk({"role": "assistant", "content": None}))
            first = False
        for delta in parser.feed(out.text) + (parser.finish() if out.finished else []):
            any_calls = any_calls or delta.call is not None
            pending += [chunk(d) for d in _delta_json(delta)]
        if body.logprobs:
            unsent += out.logprobs
            carrier = next((c for c in reversed(pending) if "role" not in c["choices"][0]["delta"]), None)
            if carrier is not None:
                carrier["choices"][0]["logprobs"] = _chat_logprobs(serving, body, unsent)
                unsent = []
        if out.finished:
            pending.append(chunk({}, _finish_reason(out, any_calls)))
            if unsent:
                pending[-1]["choices"][0]["logprobs"] = _chat_logprobs(serving, body, unsent)
            if body.include_usage and own:
                pending.append(
                    {"choices": [], **_envelope(serving, cid, "chat.completion.chunk", created), "usage": usage(out)}
                )
        if pending and (out.finished or body.timings_per_token) and not _opens_message(pending[-1]):
            pending[-1]["timings"] = out.timings.to_json()
        for item in pending:
            yield item


async def choices_chunks(
    serving: Serving,
    body: ChatCompletionRequest,
    prepared: Sequence[Prepared],
    start: Callable[[EngineRequest], AsyncIterator[EngineOutput]],
    ids: StreamIds,
) -> AsyncIterator[dict[str, Any]]:
    """``n`` choices of one answer (``ids``) streamed together: each choice's chunks (with its ``index``) as they
    come, then one usage chunk counting every choice. Leaving early ends every choice's generation."""
    queue: asyncio.Queue[tuple[int, dict[str, Any] | BaseException | None]] = asyncio.Queue()
    last: dict[int, EngineOutput] = {}

    async def follow(index: int, engine_request: EngineRequest, parser: AssistantOutputParser) -> None:
        async def recorded() -> AsyncIterator[EngineOutput]:
            async for out in start(engine_request):
                last[index] = out
                yield out

        try:
            choice = replace(ids, index=index)
            async for item in chat_chunks(serving, body, parser, recorded(), choice, one_of_several=True):
                await queue.put((index, item))
            await queue.put((index, None))
        except BaseException as exc:  # the stream's error reaches the client once, from here
            await queue.put((index, exc))

    tasks = [asyncio.ensure_future(follow(i, request, parser)) for i, (request, parser) in enumerate(prepared)]
    try:
        for _ in range(len(tasks)):
            while (got := await queue.get())[1] is not None:
                if isinstance(got[1], BaseException):
                    raise got[1]
                yield got[1]
    finally:
        for task in tasks:
            task.cancel()
    if body.include_usage:
        envelope = _envelope(serving, ids.cid, "chat.completion.chunk", ids.created)
        yield {"choices": [], **envelope, "usage": usage(*(last[i] for i in range(len(prepared))))}


def _opens_message(item: dict[str, Any]) -> bool:
    """The role chunk, which carries no timings (llama-server's first event has none)."""
    return bool(item["choices"]) and "role" in item["choices"][0]["delta"]


def _chat_logprobs(serving: Serving, body: ChatCompletionRequest, steps: Sequence[TokenLogprob]) -> dict[str, Any]:
    return chat_logprobs(serving.shown_steps(steps), serving.piece, body.top_logprobs or 0)


def _finish_reason(out: EngineOutput, has_calls: bool) -> str | None:
    return finish_reason(out.finish_reason, has_calls) if out.finish_reason is not None else None


def _delta_json(delta: OutputDelta) -> list[dict[str, Any]]:
    """A parsed piece as OpenAI stream deltas; a call is a header, then its arguments."""
    if delta.call is None:
        return [{"reasoning_content": delta.reasoning} if delta.reasoning else {"content": delta.content}]
    call = delta.call
    header = {"index": call.index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
    arguments = {"index": call.index, "function": {"arguments": call.arguments}}
    return [{"tool_calls": [header]}, {"tool_calls": [arguments]}]


# -- text completions ------------------------------------------------------------------------------
def text_completion(serving: Serving, body: CompletionRequest, results: Sequence[Collected]) -> dict[str, Any]:
    """Every prompt's answer as one ``text_completion`` object, usage summed over them."""
    choices = [
        {
            "text": done.text,
            "index": i,
            "logprobs": _legacy_logprobs(serving, body, done.logprobs),
            "finish_reason": done.last.finish_reason,
        }
        for i, done in enumerate(results)
    ]
    outs = [done.last for done in results]
    n_completion = sum(o.n_decoded for o in outs)
    n_prompt = sum(o.n_prompt_tokens for o in outs)
    return {
        "choices": choices,
        **_envelope(serving, completion_id("cmpl-"), "text_completion", int(time.time())),
        "usage": {
            "completion_tokens": n_completion,
            "prompt_tokens": n_prompt,
            "total_tokens": n_completion + n_prompt,
            "prompt_tokens_details": {"cached_tokens": sum(o.n_cached_tokens for o in outs)},
        },
        "timings": outs[-1].timings.to_json(),
    }


async def text_completion_chunks(
    serving: Serving, body: CompletionRequest, outputs: AsyncIterator[EngineOutput]
) -> AsyncIterator[dict[str, Any]]:
    cid, created = completion_id("cmpl-"), int(time.time())
    offset = 0
    async for out in outputs:
        logprobs = _legacy_logprobs(serving, body, out.logprobs, offset)
        offset += len(out.text)
        item = {
            "choices": [{"text": out.text, "index": 0, "logprobs": logprobs, "finish_reason": out.finish_reason}],
            **_envelope(serving, cid, "text_completion", created),
        }
        if out.finished:
            item["usage"] = usage(out)
        if out.finished or body.timings_per_token:
            item["timings"] = out.timings.to_json()
        yield item


def _legacy_logprobs(
    serving: Serving, body: CompletionRequest, steps: Sequence[TokenLogprob], text_offset: int = 0
) -> dict[str, Any] | None:
    if body.logprobs is None:
        return None
    return legacy_logprobs(serving.shown_steps(steps), serving.piece, body.logprobs, text_offset=text_offset)
