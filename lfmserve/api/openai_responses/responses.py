"""OpenAI Responses API answers: the ``response`` object and its event stream, shaped as llama-server writes them.

The output is a list of items: a ``reasoning`` item (``<think>`` text), a ``message`` (the answer's text)
and a ``function_call`` per tool call, in the order they start. A stream is llama-server's sequence::

    response.created, response.in_progress            (with the first output)
    response.output_item.added                         (each item as it starts; a message also gets
    response.content_part.added                         its one output_text part)
    response.reasoning_text.delta / response.output_text.delta / response.function_call_arguments.delta
    response.output_text.done, response.content_part.done, response.output_item.done    (at the end)
    response.completed                                 (the whole response, and ``timings``)

with llama-server's telemetry: ``timings`` on the last event of each step under ``timings_per_token``, and
with ``return_progress`` a ``prompt_progress`` report on a ``response.in_progress`` event. Beyond
llama-server, events carry OpenAI's ``sequence_number``, ``output_index`` and ``content_index``, so
clients that place deltas by index (the SDKs' stream helpers) can. There is no ``[DONE]``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ...chat.output import AssistantOutputParser, OutputDelta, ToolCall
from ...chat.serving import Collected, Serving
from ...engine.records import EngineOutput
from ..openai.responses import completion_id
from .protocol import ResponsesRequest


@dataclass(frozen=True, slots=True)
class ResponseIds:
    """One response's ids: the response, its reasoning item and its message item."""

    response: str
    reasoning: str
    message: str

    @classmethod
    def new(cls) -> ResponseIds:
        return cls(completion_id("resp_"), completion_id("rs_"), completion_id("msg_"))


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def function_call_id(call: ToolCall) -> str:
    """The item id of a call: llama-server's ``fc_`` beside the ``call_`` id the client answers with."""
    return "fc_" + call.id.removeprefix("call_")


def usage(out: EngineOutput) -> dict[str, Any]:
    return {
        "input_tokens": out.n_prompt_tokens,
        "output_tokens": out.n_decoded,
        "total_tokens": out.n_prompt_tokens + out.n_decoded,
        "input_tokens_details": {"cached_tokens": out.n_cached_tokens},
    }


class OutputItems:
    """The output items, built from the parser's deltas; each delta gives the stream events that report it.

    A whole response feeds every delta and keeps only :meth:`output`, so both modes build the same items.
    """

    def __init__(self, ids: ResponseIds) -> None:
        self.ids = ids
        self._reasoning = ""
        self._text = ""
        self._calls: dict[str, ToolCall] = {}
        self._order: list[str] = []  # item ids, as the items start: an item's output_index is its place here

    def add(self, delta: OutputDelta) -> list[dict[str, Any]]:
        if delta.call is not None:
            item_id, kind, text = function_call_id(delta.call), "function_call_arguments", delta.call.arguments
            self._calls[item_id] = delta.call
        elif delta.reasoning:
            item_id, kind, text = self.ids.reasoning, "reasoning_text", delta.reasoning
            self._reasoning += text
        elif delta.content:
            item_id, kind, text = self.ids.message, "output_text", delta.content
            self._text += text
        else:
            return []
        events = self._started(item_id)
        where: dict[str, Any] = {"item_id": item_id, "output_index": self._order.index(item_id)}
        if delta.call is None:
            where["content_index"] = 0  # the one part of a message or reasoning item; calls have none
        return [*events, {"type": f"response.{kind}.delta", **where, "delta": text}]

    def output(self) -> list[dict[str, Any]]:
        """The finished items, in output order."""
        return [self._item(item_id, done=True) for item_id in self._order]

    def done_events(self) -> list[dict[str, Any]]:
        """The end of each item: a message's text and part first, then every item's whole self."""
        events = []
        for index, item_id in enumerate(self._order):
            if item_id == self.ids.message:
                where = {"item_id": item_id, "output_index": index, "content_index": 0}
                events.append({"type": "response.output_text.done", **where, "text": self._text})
                events.append({"type": "response.content_part.done", **where, "part": text_part(self._text)})
            events.append(
                {"type": "response.output_item.done", "output_index": index, "item": self._item(item_id, True)}
            )
        return events

    def _started(self, item_id: str) -> list[dict[str, Any]]:
        """The events that open an item, the first time it has something (none after that)."""
        if item_id in self._order:
            return []
        self._order.append(item_id)
        index = len(self._order) - 1
        events = [{"type": "response.output_item.added", "output_index": index, "item": self._item(item_id, False)}]
        if item_id == self.ids.message:
            where = {"item_id": item_id, "output_index": index, "content_index": 0}
            events.append({"type": "response.content_part.added", **where, "part": text_part("")})
        return events

    def _item(self, item_id: str, done: bool) -> dict[str, Any]:
        """An item as added (empty, ``in_progress``) or done (whole, ``completed``)."""
        status = "completed" if done else "in_progress"
        if item_id == self.ids.reasoning:
            content = [{"text": self._reasoning, "type": "reasoning_text"}] if done else []
            return {
                "id": item_id,
                "summary": [],
                "type": "reasoning",
                "content": content,
                "encrypted_content": "",
                "status": status,
            }
        if item_id == self.ids.message:
            content = [text_part(self._text)] if done else []
            return {"content": content, "id": item_id, "role": "assistant", "status": status, "type": "message"}
        call = self._calls[item_id]
        return {
            "id": item_id,
            "type": "function_call",
            "status": status,
            "arguments": call.arguments if done else "",
            "call_id": call.id,
            "name": call.name,
        }


def _response(serving: Serving, ids: ResponseIds, created_at: int, **fields: Any) -> dict[str, Any]:
    return {"id": ids.response, "object": "response", "created_at": created_at, "model": serving.model_name, **fields}


def response_object(
    serving: Serving, ids: ResponseIds, created_at: int, items: OutputItems, out: EngineOutput
) -> dict[str, Any]:
    """The finished ``response`` (llama-server always says ``completed``, a cut-off answer included)."""
    return _response(
        serving,
        ids,
        created_at,
        completed_at=int(time.time()),
        status="completed",
        output=items.output(),
        usage=usage(out),
    )


def whole_response(serving: Serving, parser: AssistantOutputParser, done: Collected) -> dict[str, Any]:
    """The answer to a request without ``stream``."""
    ids = ResponseIds.new()
    items = OutputItems(ids)
    for delta in parser.feed(done.text) + parser.finish():
        items.add(delta)
    return response_object(serving, ids, int(time.time()), items, done.last)


async def response_events(
    serving: Serving, body: ResponsesRequest, parser: AssistantOutputParser, outputs: AsyncIterator[EngineOutput]
) -> AsyncIterator[dict[str, Any]]:
    """The stream's events, numbered, in llama-server's steps: each output's, then the end's. A step's last event
    carries ``timings`` under ``timings_per_token``, and so do the last output's and the end's, as in llama-server."""
    ids, created_at = ResponseIds.new(), int(time.time())
    items = OutputItems(ids)
    n_sent = 0
    async for out in outputs:
        steps = _opening(serving, ids, created_at, body, out) if n_sent == 0 else [[]]
        deltas = parser.feed(out.text) + (parser.finish() if out.finished else [])
        steps[-1] += [event for delta in deltas for event in items.add(delta)]
        if out.finished:
            completed = response_object(serving, ids, created_at, items, out)
            steps.append([*items.done_events(), {"type": "response.completed", "response": completed}])
        for step in steps:
            if step and (body.timings_per_token or out.finished):
                step[-1]["timings"] = out.timings.to_json()
            for event in step:
                yield {"type": event.pop("type"), "sequence_number": n_sent, **event}
                n_sent += 1


def _opening(
    serving: Serving, ids: ResponseIds, created_at: int, body: ResponsesRequest, first: EngineOutput
) -> list[list[dict[str, Any]]]:
    """``response.created`` and ``response.in_progress``: with ``return_progress`` a step of their own whose
    ``in_progress`` reports the prompt as processed (once, when it is: the engine does not report batches)."""
    snapshot = _response(serving, ids, created_at, status="in_progress", output=[])
    opening = [
        {"type": "response.created", "response": snapshot},
        {"type": "response.in_progress", "response": snapshot},
    ]
    if not body.return_progress:
        return [opening]  # the first output's events join this step
    opening[-1]["prompt_progress"] = {
        "total": first.n_prompt_tokens,
        "cache": first.n_cached_tokens,
        "processed": first.n_prompt_tokens,
        "time_ms": int(first.timings.prompt_ms),
    }
    return [opening, []]
