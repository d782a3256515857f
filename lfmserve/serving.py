"""From validated request bodies to engine requests, and from engine outputs to llama-server's JSON.

No HTTP and no llama calls here: :class:`Serving` renders the chat template, tokenizes, resolves
sampling defaults, submits to the engine and shapes what comes back. A non-streaming response is
the collected stream, so both modes share one path.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from .assistant_output import AssistantOutputParser, OutputDelta
from .chat_plan import ChatPlan, constraint_mask, plan_chat, template_kwargs
from .chat_template import ChatFormatter
from .constraints import Grammars
from .engine import Engine
from .errors import InvalidRequest
from .logprobs import chat_logprobs, legacy_logprobs, native_probabilities
from .native import NativeModel
from .protocol import (
    ApplyTemplateRequest,
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    MediaPart,
    Prompt,
    SamplingFields,
    TextPart,
)
from .records import EngineOutput, EngineRequest, TokenLogprob
from .sampling import ResolvedDefaults
from .stream import AsyncStream, CollectingStream
from .tool_calls import format_calls


def completion_id(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(24).replace("-", "a").replace("_", "b")[:32]


@dataclass(slots=True)
class Collected:
    """A whole generation: the joined text and the last output (finish reason, counts, timings)."""

    text: str
    tokens: list[int]
    last: EngineOutput
    logprobs: list[TokenLogprob]


def usage(out: EngineOutput) -> dict[str, Any]:
    return {
        "completion_tokens": out.n_decoded,
        "prompt_tokens": out.n_prompt_tokens,
        "total_tokens": out.n_decoded + out.n_prompt_tokens,
        "prompt_tokens_details": {"cached_tokens": out.n_cached_tokens},
    }


class Serving:
    """The model's serving logic, shared by every route."""

    def __init__(
        self,
        model: NativeModel,
        engine: Engine,
        template: ChatFormatter,
        *,
        model_name: str,
        defaults: ResolvedDefaults,
        default_max_tokens: int,
        fingerprint: str,
        reasoning_format: str = "auto",
    ) -> None:
        self.model = model
        self.engine = engine
        self.template = template
        self.grammars = Grammars(model)
        self.reasoning_format = reasoning_format
        self.model_name = model_name
        self.defaults = defaults
        self.default_max_tokens = default_max_tokens
        self.fingerprint = fingerprint

    # -- prompts ---------------------------------------------------------------------------------
    def render_chat(self, body: ChatCompletionRequest | ApplyTemplateRequest, plan: ChatPlan | None = None) -> str:
        """The prompt text; ``plan`` decides which tools and variables the template sees (all, without one)."""
        messages = [self._template_message(m) for m in body.messages]
        if plan is None:
            tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
            extra = template_kwargs(body)
        else:
            tools, extra = plan.tools, plan.template_kwargs
        return self.template.render(
            messages, tools=tools, add_generation_prompt=body.add_generation_prompt, extra=extra
        )

    def _template_message(self, message: ChatMessage) -> dict[str, Any]:
        content = message.content
        if isinstance(content, list):
            content = self.template.normalize_content([_template_part(part) for part in content])
        out: dict[str, Any] = {
            "role": "system" if message.role == "developer" else message.role,
            "content": content if content is not None else "",
        }
        for key in ("name", "tool_call_id", "reasoning_content"):
            if getattr(message, key) is not None:
                out[key] = getattr(message, key)
        if message.reasoning_content is not None:
            out["thinking"] = message.reasoning_content  # the name LFM2.5-8B-A1B's template reads
        if message.tool_calls:
            calls = [_tool_call_for_template(call) for call in message.tool_calls]
            out["tool_calls"] = calls
            if not self.template.caps.supports_tool_calls:  # the template would drop them: write them as generated
                out["content"] = _with_text(out["content"], format_calls(calls))
        return out

    def tokenize_prompt(self, prompt: Prompt) -> list[int]:
        """A /completion prompt: text, token ids, or a mix of both (llama-server's tokenize_mixed)."""
        if isinstance(prompt, str):
            return self.model.tokenize(prompt, add_special=True, parse_special=True)
        tokens: list[int] = []
        for i, piece in enumerate(prompt):
            if isinstance(piece, int):
                tokens.append(piece)
            else:
                tokens += self.model.tokenize(piece, add_special=i == 0, parse_special=True)
        return tokens

    def engine_request(
        self, body: SamplingFields, prompt_tokens: Sequence[int], plan: ChatPlan | None = None
    ) -> EngineRequest:
        max_tokens = body.requested_max_tokens()
        sampling = self.defaults.params.updated(body.sampling_overrides())
        sampling = sampling.updated({"logit_bias": self._logit_bias(body)})
        return EngineRequest(
            prompt_tokens=tuple(prompt_tokens),
            sampling=sampling,
            max_tokens=self.default_max_tokens if max_tokens is None else max_tokens,
            stop=body.stop_strings,
            cache_prompt=body.cache_prompt,
            id_slot=body.id_slot,
            keep_special=plan.keep_special if plan else frozenset(),
            mask=plan.mask if plan else constraint_mask(body, self.grammars),
            n_probs=0 if body.top_probs() is None else max(body.top_probs() or 0, 1),
        )

    def _piece(self, token: int) -> bytes:
        """A token's text as the output shows it (kept markers are parsed away before they are shown)."""
        return self.model.token_to_piece(token)

    def _chat_logprobs(self, body: ChatCompletionRequest, steps: Sequence[TokenLogprob]) -> dict[str, Any]:
        """The generated tokens' probabilities; the end-of-generation token is not part of the message."""
        shown = [step for step in steps if not self.model.is_eog(step.token)]
        return chat_logprobs(shown, self._piece, body.top_logprobs or 0)

    def _logit_bias(self, body: SamplingFields) -> tuple[tuple[int, float], ...]:
        """OpenAI's ``{"id": bias}`` or llama-server's ``[[id or text, bias or false], ...]``."""
        raw = body.logit_bias
        if not raw:
            return ()
        pairs = list(raw.items()) if isinstance(raw, dict) else [tuple(p) for p in raw]
        out: list[tuple[int, float]] = []
        for pair in pairs:
            if len(pair) != 2:
                raise InvalidRequest("logit_bias entries must be [token, bias] pairs", param="logit_bias")
            key, bias = pair
            value = float("-inf") if bias is False else float(bias)
            if isinstance(key, str) and not key.lstrip("-").isdigit():
                ids = self.model.tokenize(key, add_special=False, parse_special=False)
            else:
                ids = [int(key)]
            for token in ids:
                if not self.model.is_valid_token(token):
                    raise InvalidRequest(
                        f"logit_bias token id {token} is out of range (vocabulary has {self.model.n_vocab} tokens)",
                        param="logit_bias",
                    )
                out.append((token, value))
        return tuple(out)

    # -- running ---------------------------------------------------------------------------------
    async def run(self, request: EngineRequest) -> Collected:
        """Generate to the end and return the whole text (the client waits for it all)."""
        stream = CollectingStream()
        request_id = self.engine.submit(request, stream)
        try:
            last = await stream.last()
        except asyncio.CancelledError:
            self.engine.cancel(request_id)
            raise
        return Collected("".join(stream.texts), stream.tokens, last, stream.logprobs)

    def start(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        """Submit now (so invalid requests raise before any response starts) and follow the outputs.

        Leaving the iteration early (the client has gone) cancels the request in the engine.
        """
        stream = AsyncStream()
        request_id = self.engine.submit(request, stream)
        return self._follow(stream, request_id)

    async def _follow(self, stream: AsyncStream, request_id: int) -> AsyncIterator[EngineOutput]:
        finished = False
        try:
            async for out in stream:
                finished = out.finished
                yield out
        finally:
            if not finished:
                self.engine.cancel(request_id)

    # -- /v1/chat/completions --------------------------------------------------------------------
    def prepare_chat(self, body: ChatCompletionRequest) -> tuple[EngineRequest, AssistantOutputParser]:
        for message in body.messages:
            if isinstance(message.content, list) and any(isinstance(p, MediaPart) for p in message.content):
                raise InvalidRequest(
                    "image and audio input are not supported: this model has no multimodal projector", param="messages"
                )
        plan = plan_chat(body, self.grammars, reasoning_format=self.reasoning_format)
        prompt = self.render_chat(body, plan)
        return self.engine_request(body, self.model.tokenize_chat(prompt), plan), plan.parser(prompt)

    def _envelope(self, cid: str, obj: str, created: int) -> dict[str, Any]:
        return {
            "created": created,
            "id": cid,
            "model": self.model_name,
            "system_fingerprint": self.fingerprint,
            "object": obj,
        }

    async def chat_completion(self, body: ChatCompletionRequest) -> dict[str, Any]:
        request, parser = self.prepare_chat(body)
        done = await self.run(request)
        out = done.last
        parsed = parser.parse(done.text)
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.reasoning:
            message["reasoning_content"] = parsed.reasoning
        if parsed.calls:
            message["tool_calls"] = [call.to_json() for call in parsed.calls]
        choice: dict[str, Any] = {
            "finish_reason": _finish_reason(out, bool(parsed.calls)),
            "index": 0,
            "message": message,
        }
        if body.logprobs:
            choice["logprobs"] = self._chat_logprobs(body, done.logprobs)
        return {
            "choices": [choice],
            **self._envelope(completion_id("chatcmpl-"), "chat.completion", int(time.time())),
            "usage": usage(out),
            "timings": out.timings.to_json(),
        }

    def chat_completion_chunks(self, body: ChatCompletionRequest) -> AsyncIterator[dict[str, Any]]:
        """llama-server's chunk sequence: role, content deltas, finish, optional usage; timings last."""
        request, parser = self.prepare_chat(body)
        return self._chat_chunks(body, parser, self.start(request))

    async def _chat_chunks(
        self, body: ChatCompletionRequest, parser: AssistantOutputParser, outputs: AsyncIterator[EngineOutput]
    ) -> AsyncIterator[dict[str, Any]]:
        cid, created = completion_id("chatcmpl-"), int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
                **self._envelope(cid, "chat.completion.chunk", created),
            }

        first, any_calls = True, False
        unsent: list[TokenLogprob] = []  # probabilities wait for a chunk while the parser holds text back
        async for out in outputs:
            pending: list[dict[str, Any]] = []
            if first:
                pending.append(chunk({"role": "assistant", "content": None}))
                first = False
            deltas = parser.feed(out.text) + (parser.finish() if out.finished else [])
            for delta in deltas:
                any_calls = any_calls or delta.call is not None
                pending += [chunk(d) for d in _delta_json(delta)]
            if body.logprobs:
                unsent += out.logprobs
                carrier = next((c for c in reversed(pending) if "role" not in c["choices"][0]["delta"]), None)
                if carrier is not None:
                    carrier["choices"][0]["logprobs"] = self._chat_logprobs(body, unsent)
                    unsent = []
            if body.timings_per_token:
                for item in pending:
                    item["timings"] = out.timings.to_json()
            if out.finished:
                pending.append(chunk({}, _finish_reason(out, any_calls)))
                if unsent:
                    pending[-1]["choices"][0]["logprobs"] = self._chat_logprobs(body, unsent)
                if body.stream_options is not None and body.stream_options.include_usage:
                    pending.append(
                        {"choices": [], **self._envelope(cid, "chat.completion.chunk", created), "usage": usage(out)}
                    )
                pending[-1]["timings"] = out.timings.to_json()
            for item in pending:
                yield item

    # -- /completion (native) and /v1/completions ------------------------------------------------
    def prepare_completion(self, body: CompletionRequest) -> list[EngineRequest]:
        prompts = body.prompt if _is_prompt_list(body.prompt) else [body.prompt]
        requests = [self.engine_request(body, self.tokenize_prompt(p)) for p in prompts]  # type: ignore[arg-type]
        if body.stream and len(requests) > 1:
            raise InvalidRequest("streaming is supported for a single prompt only", param="prompt")
        return requests

    async def run_completions(self, body: CompletionRequest) -> list[tuple[EngineRequest, Collected]]:
        """Every prompt of a non-streaming completion, run concurrently in the engine's slots."""
        requests = self.prepare_completion(body)
        done = await asyncio.gather(*(self.run(r) for r in requests))
        return list(zip(requests, done, strict=True))

    def native_result(
        self,
        body: CompletionRequest,
        request: EngineRequest,
        done: Collected | None,
        out: EngineOutput,
        *,
        index: int = 0,
    ) -> dict[str, Any]:
        """llama-server's final /completion object (``content`` is empty after a stream)."""
        return {
            "index": index,
            "content": done.text if done else "",
            "tokens": [],
            "id_slot": out.id_slot,
            "stop": True,
            "model": self.model_name,
            "tokens_predicted": out.n_decoded,
            "tokens_evaluated": out.n_prompt_tokens,
            "generation_settings": {
                **request.sampling.to_json(),
                "n_predict": request.max_tokens,
                "stop": list(request.stop),
                "stream": body.stream,
                "cache_prompt": request.cache_prompt,
            },
            "prompt": self.model.detokenize(request.prompt_tokens, special=True),
            "has_new_line": "\n" in done.text if done else False,
            "truncated": False,
            "stop_type": out.stop_type,
            "stopping_word": out.stopping_word,
            "tokens_cached": out.n_prompt_tokens + max(out.n_decoded - 1, 0),
            "timings": out.timings.to_json(),
            **self._native_probs(body, done.logprobs if done else ()),
        }

    def _native_probs(self, body: CompletionRequest, steps: Sequence[TokenLogprob]) -> dict[str, Any]:
        if body.n_probs <= 0:
            return {}
        return {"completion_probabilities": native_probabilities(steps, self._piece, body.n_probs)}

    def native_chunks(self, body: CompletionRequest) -> AsyncIterator[dict[str, Any]]:
        request = self.prepare_completion(body)[0]
        return self._native_chunks(body, request, self.start(request))

    async def _native_chunks(
        self, body: CompletionRequest, request: EngineRequest, outputs: AsyncIterator[EngineOutput]
    ) -> AsyncIterator[dict[str, Any]]:
        async for out in outputs:
            if out.finished:
                if out.text:
                    yield self._native_partial(out, body)
                yield self.native_result(body, request, None, out)
            else:
                yield self._native_partial(out, body)

    def _native_partial(self, out: EngineOutput, body: CompletionRequest) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "index": 0,
            "content": out.text,
            "tokens": list(out.token_ids),
            "stop": False,
            "id_slot": out.id_slot,
            "tokens_predicted": out.n_decoded,
            "tokens_evaluated": out.n_prompt_tokens,
            **self._native_probs(body, out.logprobs),
        }
        if body.timings_per_token:
            chunk["timings"] = out.timings.to_json()
        return chunk

    def openai_completion(self, body: CompletionRequest, done: Collected, *, index: int = 0) -> dict[str, Any]:
        return {
            "text": done.text,
            "index": index,
            "logprobs": self._legacy_logprobs(body, done.logprobs),
            "finish_reason": done.last.finish_reason,
        }

    def _legacy_logprobs(
        self, body: CompletionRequest, steps: Sequence[TokenLogprob], text_offset: int = 0
    ) -> dict[str, Any] | None:
        if body.logprobs is None:
            return None
        shown = [step for step in steps if not self.model.is_eog(step.token)]
        return legacy_logprobs(shown, self._piece, body.logprobs, text_offset=text_offset)

    def openai_completion_body(self, choices: list[dict[str, Any]], outs: list[EngineOutput]) -> dict[str, Any]:
        total = {
            "completion_tokens": sum(o.n_decoded for o in outs),
            "prompt_tokens": sum(o.n_prompt_tokens for o in outs),
        }
        return {
            "choices": choices,
            **self._envelope(completion_id("cmpl-"), "text_completion", int(time.time())),
            "usage": {
                **total,
                "total_tokens": total["completion_tokens"] + total["prompt_tokens"],
                "prompt_tokens_details": {"cached_tokens": sum(o.n_cached_tokens for o in outs)},
            },
            "timings": outs[-1].timings.to_json(),
        }

    def openai_completion_chunks(self, body: CompletionRequest) -> AsyncIterator[dict[str, Any]]:
        return self._openai_chunks(body, self.start(self.prepare_completion(body)[0]))

    async def _openai_chunks(
        self, body: CompletionRequest, outputs: AsyncIterator[EngineOutput]
    ) -> AsyncIterator[dict[str, Any]]:
        cid, created = completion_id("cmpl-"), int(time.time())
        offset = 0
        async for out in outputs:
            logprobs = self._legacy_logprobs(body, out.logprobs, offset)
            offset += len(out.text)
            item = {
                "choices": [{"text": out.text, "index": 0, "logprobs": logprobs, "finish_reason": out.finish_reason}],
                **self._envelope(cid, "text_completion", created),
            }
            if out.finished:
                item["usage"] = usage(out)
            if out.finished or body.timings_per_token:
                item["timings"] = out.timings.to_json()
            yield item

    # -- /tokenize, /detokenize ------------------------------------------------------------------
    def tokenize(self, content: str, *, add_special: bool, parse_special: bool, with_pieces: bool) -> dict[str, Any]:
        tokens = self.model.tokenize(content, add_special=add_special, parse_special=parse_special)
        if not with_pieces:
            return {"tokens": tokens}
        pieces: list[dict[str, Any]] = []
        for token in tokens:
            raw = self.model.token_to_piece(token, special=True)
            try:
                piece: Any = raw.decode("utf-8")
            except UnicodeDecodeError:
                piece = list(raw)
            pieces.append({"id": token, "piece": piece})
        return {"tokens": pieces}

    def detokenize(self, tokens: list[int]) -> dict[str, Any]:
        bad = [t for t in tokens if not self.model.is_valid_token(t)]
        if bad:
            raise InvalidRequest(
                f"Invalid token id {bad[0]} (vocabulary has {self.model.n_vocab} tokens)", param="tokens"
            )
        return {"content": self.model.detokenize(tokens, special=True)}


def _is_prompt_list(prompt: Any) -> bool:
    """True for a list of prompts (``["a", "b"]`` or ``[[1, 2], [3]]``), false for one mixed prompt."""
    return (
        isinstance(prompt, list)
        and len(prompt) > 0
        and all(isinstance(p, list) for p in prompt)
        or (isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str) for p in prompt))
    )


def _finish_reason(out: EngineOutput, has_calls: bool) -> str | None:
    """OpenAI's ``tool_calls`` when the answer ended by itself with calls (cut off, it stays ``length``)."""
    return "tool_calls" if has_calls and out.finish_reason == "stop" else out.finish_reason


def _delta_json(delta: OutputDelta) -> list[dict[str, Any]]:
    """A parsed piece as OpenAI stream deltas; a call is a header, then its arguments."""
    if delta.call is None:
        return [{"reasoning_content": delta.reasoning} if delta.reasoning else {"content": delta.content}]
    call = delta.call
    header = {"index": call.index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
    arguments = {"index": call.index, "function": {"arguments": call.arguments}}
    return [{"tool_calls": [header]}, {"tool_calls": [arguments]}]


def _template_part(part: TextPart | MediaPart) -> dict[str, Any]:
    """A content part as templates read it: media parts are ``{"type": "image"}`` (or ``audio``) items."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    return {"type": "audio" if part.type == "input_audio" else "image"}


def _with_text(content: Any, text: str) -> Any:
    """Content (a string or typed parts) with ``text`` appended."""
    if isinstance(content, list):
        return [*content, {"type": "text", "text": text}]
    return (content or "") + text


def _tool_call_for_template(call: dict[str, Any]) -> dict[str, Any]:
    """Templates read ``function.arguments`` as a mapping; OpenAI sends it as a JSON string."""
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            function["arguments"] = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise InvalidRequest(f"tool call arguments are not valid JSON: {exc}", param="messages") from exc
    return {**call, "function": function}
