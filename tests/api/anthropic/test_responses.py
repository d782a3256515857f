"""Messages and their stream events from scripted engine outputs: thinking, text and tool calls, which the random
tiny model does not write on its own, in llama-server's order; and the official client's accumulator rebuilds
from the stream exactly the message the whole answer is."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

from anthropic.lib.streaming._messages import accumulate_event

from lfmserve.api.anthropic import responses
from lfmserve.api.sse import sse
from lfmserve.chat.output import AssistantOutputParser
from lfmserve.chat.serving import Collected, Serving
from lfmserve.engine.records import EngineOutput, FinishReason, StopType, Timings
from lfmserve.errors import Unavailable

SERVING = cast(Serving, SimpleNamespace(model_name="tiny.gguf"))
PIECES = ["<think>Let me", " think.</think>", "Sure", ", calling.", '<|tool_call_start|>[f(x=1), g(s="é")]']
CALLS_END = "<|tool_call_end|>"


def _out(text: str, n_decoded: int, finish: FinishReason | None = None, stop: StopType | None = None) -> EngineOutput:
    return EngineOutput(
        text=text,
        token_ids=(1,),
        id_slot=0,
        n_prompt_tokens=30,
        n_cached_tokens=12,
        n_decoded=n_decoded,
        timings=Timings(),
        finish_reason=finish,
        stop_type=stop,
        stopping_word="END" if stop == "word" else "",
    )


def _parser() -> AssistantOutputParser:
    return AssistantOutputParser(split_reasoning=True, parse_tool_calls=True)


def _outputs(pieces: list[str], last: EngineOutput) -> list[EngineOutput]:
    return [_out(piece, i + 1) for i, piece in enumerate(pieces)] + [last]


def _events(outputs: list[EngineOutput]) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        async def follow() -> AsyncIterator[EngineOutput]:
            for out in outputs:
                yield out

        return [event async for event in responses.message_events(SERVING, _parser(), follow())]

    return asyncio.run(run())


def _message(outputs: list[EngineOutput]) -> dict[str, Any]:
    done = Collected("".join(o.text for o in outputs), [], outputs[-1], [])
    return responses.message(SERVING, done, _parser())


def _without_ids(value: Any) -> Any:
    """Ids are random per answer: blank them so two answers compare."""
    if isinstance(value, dict):
        return {k: "ID" if k == "id" else _without_ids(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


def test_the_event_sequence_is_llama_servers() -> None:
    events = _without_ids(_events(_outputs(PIECES, _out(CALLS_END, 6, "stop", "eos"))))

    def delta(index: int, **piece: str) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": piece}

    def start(index: int, **block: Any) -> dict[str, Any]:
        return {"type": "content_block_start", "index": index, "content_block": block}

    assert events == [
        {
            "type": "message_start",
            "message": {
                "id": "ID",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "tiny.gguf",
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"cache_read_input_tokens": 12, "input_tokens": 18, "output_tokens": 0},
            },
        },
        start(0, type="thinking", thinking=""),
        delta(0, type="thinking_delta", thinking="Let me"),
        delta(0, type="thinking_delta", thinking=" think."),
        start(1, type="text", text=""),
        delta(1, type="text_delta", text="Sure"),
        delta(1, type="text_delta", text=", calling."),
        start(2, type="tool_use", id="ID", name="f", input={}),
        delta(2, type="input_json_delta", partial_json='{"x": 1}'),
        start(3, type="tool_use", id="ID", name="g", input={}),
        delta(3, type="input_json_delta", partial_json='{"s": "é"}'),
        delta(0, type="signature_delta", signature=""),
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_stop", "index": 2},
        {"type": "content_block_stop", "index": 3},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 6},
        },
        {"type": "message_stop"},
    ]


def test_the_whole_message_has_llama_servers_fields() -> None:
    message = _message(_outputs(PIECES, _out(CALLS_END, 6, "stop", "eos")))
    assert message["id"].startswith("chatcmpl-")
    assert message["content"][2]["id"].startswith("call_")
    assert _without_ids(message) == {
        "id": "ID",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Let me think.", "signature": ""},
            {"type": "text", "text": "Sure, calling."},
            {"type": "tool_use", "id": "ID", "name": "f", "input": {"x": 1}},
            {"type": "tool_use", "id": "ID", "name": "g", "input": {"s": "é"}},
        ],
        "model": "tiny.gguf",
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"cache_read_input_tokens": 12, "input_tokens": 18, "output_tokens": 6},
    }


def test_the_official_accumulator_rebuilds_the_whole_message_from_the_stream() -> None:
    for outputs in (
        _outputs(PIECES, _out(CALLS_END, 6, "stop", "eos")),
        _outputs(["Hello", " world"], _out("", 3, "stop", "word")),
        _outputs(["<think>cut off"], _out(" here", 2, "length", "limit")),
    ):
        snapshot, json_bufs = None, dict[int, bytes]()
        for event in _events(outputs):
            snapshot = accumulate_event(event=cast(Any, event), current_snapshot=snapshot, json_bufs=json_bufs)
        assert snapshot is not None
        rebuilt = snapshot.to_dict(exclude_none=False)
        whole = _message(outputs)
        assert _without_ids({key: rebuilt[key] for key in whole}) == _without_ids(whole)


def test_stop_reasons() -> None:
    def reason(text: str, last: EngineOutput) -> tuple[str, str | None]:
        message = _message([_out(text, 1), last])
        return message["stop_reason"], message["stop_sequence"]

    assert reason("Hi", _out("", 2, "stop", "eos")) == ("end_turn", None)
    assert reason("Hi", _out("", 2, "stop", "word")) == ("stop_sequence", "END")
    assert reason("Hi", _out("", 2, "length", "limit")) == ("max_tokens", None)
    # A call cut off by the limit stays text, and the answer is cut off, not a tool use.
    assert reason("<|tool_call_start|>[f(", _out("x=1)]", 2, "length", "limit")) == ("max_tokens", None)


def test_an_empty_answer_is_a_message_with_no_blocks() -> None:
    assert _message([_out("", 1, "stop", "eos")])["content"] == []
    types = [event["type"] for event in _events([_out("", 1, "stop", "eos")])]
    assert types == ["message_start", "message_delta", "message_stop"]


def test_events_are_named_and_an_error_mid_stream_is_an_error_event() -> None:
    async def events() -> AsyncIterator[dict[str, Any]]:
        yield {"type": "message_start"}
        raise Unavailable("the server is shutting down")

    async def body() -> bytes:
        response = sse(events(), done_marker=False, named_events=True)
        return b"".join([bytes(p) if not isinstance(p, str) else p.encode() async for p in response.body_iterator])

    assert asyncio.run(body()) == (
        b'event: message_start\ndata: {"type": "message_start"}\n\n'
        b'event: error\ndata: {"code": 503, "message": "the server is shutting down", "type": "unavailable_error"}\n\n'
    )
