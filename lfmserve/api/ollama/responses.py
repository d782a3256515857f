"""Ollama's answers to ``/api/chat`` and ``/api/generate``, streamed (one object per line) or whole.

A stream has a line per piece of the answer (``message.content`` or ``message.thinking``; ``response`` or
``thinking`` for generate), each tool call whole in a line of its own with its arguments as an object, then a
last line with ``done: true``, ``done_reason`` and the counters, durations in nanoseconds. A whole answer is
that last line with the whole message in it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...chat.logprobs import chat_logprobs
from ...chat.output import AssistantOutputParser, OutputDelta, ToolCall
from ...chat.serving import Collected
from ...engine.records import EngineOutput, TokenLogprob
from .cards import timestamp

#: Turns a step's probabilities into Ollama's ``logprobs`` entries.
LogprobsShaper = Callable[[Sequence[TokenLogprob]], list[dict[str, Any]]]


@dataclass(slots=True)
class Reply:
    """One answer in the making: the name the request used (Ollama echoes it) and when the request began."""

    model: str
    started_ns: int = field(default_factory=time.perf_counter_ns)
    #: None: the request asked for no probabilities.
    logprobs: LogprobsShaper | None = None

    def line(self, **fields: Any) -> dict[str, Any]:
        return {"model": self.model, "created_at": timestamp(time.time()), **fields}

    def stats(self, out: EngineOutput) -> dict[str, Any]:
        """The last line's ``done_reason``, counters and durations (nanoseconds)."""
        timings = out.timings
        return {
            "done": True,
            "done_reason": "length" if out.finish_reason == "length" else "stop",
            "total_duration": time.perf_counter_ns() - self.started_ns,
            "load_duration": 0,
            "prompt_eval_count": out.n_prompt_tokens,
            "prompt_eval_duration": round(timings.prompt_ms * 1e6),
            "eval_count": out.n_decoded,
            "eval_duration": round(timings.predicted_ms * 1e6),
        }


def logprobs_shaper(
    piece: Callable[[int], bytes], shown: Callable[[Sequence[TokenLogprob]], Any], n_top: int
) -> LogprobsShaper:
    """Ollama's entries are OpenAI's chat ones (``token``, ``logprob``, ``bytes``, ``top_logprobs``)."""
    return lambda steps: list(chat_logprobs(shown(steps), piece, n_top)["content"])


# -- /api/chat ----------------------------------------------------------------------------------------
def chat_whole(reply: Reply, parser: AssistantOutputParser, done: Collected) -> dict[str, Any]:
    parsed = parser.parse(done.text)
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.reasoning:
        message["thinking"] = parsed.reasoning
    if parsed.calls:
        message["tool_calls"] = [_call(call) for call in parsed.calls]
    return _whole(reply, done, message=message)


def chat_lines(
    reply: Reply, parser: AssistantOutputParser, outputs: AsyncIterator[EngineOutput]
) -> AsyncIterator[dict[str, Any]]:
    return _lines(reply, parser, outputs, _chat_piece, {"message": {"role": "assistant", "content": ""}})


def _chat_piece(delta: OutputDelta) -> dict[str, Any]:
    if delta.call is not None:
        return {"message": {"role": "assistant", "content": "", "tool_calls": [_call(delta.call)]}}
    if delta.reasoning:
        return {"message": {"role": "assistant", "content": "", "thinking": delta.reasoning}}
    return {"message": {"role": "assistant", "content": delta.content}}


def _call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "function": {"index": call.index, "name": call.name, "arguments": call.arguments_object()}}


# -- /api/generate ------------------------------------------------------------------------------------
def generate_whole(reply: Reply, parser: AssistantOutputParser, done: Collected) -> dict[str, Any]:
    parsed = parser.parse(done.text)
    return _whole(reply, done, response=parsed.content, **({"thinking": parsed.reasoning} if parsed.reasoning else {}))


def generate_lines(
    reply: Reply, parser: AssistantOutputParser, outputs: AsyncIterator[EngineOutput]
) -> AsyncIterator[dict[str, Any]]:
    return _lines(reply, parser, outputs, _generate_piece, {"response": ""})


def _generate_piece(delta: OutputDelta) -> dict[str, Any]:
    return {"response": "", "thinking": delta.reasoning} if delta.reasoning else {"response": delta.content}


def _whole(reply: Reply, done: Collected, **fields: Any) -> dict[str, Any]:
    """A whole answer: the last line with the answer's fields in it (and its probabilities, if asked)."""
    line = reply.line(**fields, **reply.stats(done.last))
    if reply.logprobs is not None:
        line["logprobs"] = reply.logprobs(done.logprobs)
    return line


async def _lines(
    reply: Reply,
    parser: AssistantOutputParser,
    outputs: AsyncIterator[EngineOutput],
    piece: Callable[[OutputDelta], dict[str, Any]],
    empty: dict[str, Any],
) -> AsyncIterator[dict[str, Any]]:
    """A line per parsed piece, then the last line; probabilities ride on the next line written after their step
    (the parser may hold a step's text back)."""
    unsent: list[TokenLogprob] = []
    async for out in outputs:
        if out.progress is not None:
            continue
        unsent += out.logprobs
        lines = [reply.line(**piece(delta), done=False) for delta in parser.feed(out.text)]
        if out.finished:
            lines += [reply.line(**piece(delta), done=False) for delta in parser.finish()]
            lines.append(reply.line(**empty, **reply.stats(out)))
        if lines and unsent and reply.logprobs is not None:
            lines[0]["logprobs"] = reply.logprobs(unsent)
            unsent = []
        for line in lines:
            yield line
