"""The web UI's agent loop in Chromium against a real lfmserve with ``--tools``, behind a path prefix: the tools
listed and offered, the model's call run through ``POST /tools`` and its answer sent back for the next reply,
the loop's cap, Stop, and End thinking on a thinking template.

The models are scripted (:mod:`lfmserve.testing.scripted`). The reader has the token ``"notes.txt")]`` and
favours it with the call's start, so wherever a tool is offered it calls ``read_file(path="notes.txt")``, and
the page's JSON schema (the settings' structured output) ends its reply after one call. It calls whenever a
tool is offered, so a test that wants the next reply to be an answer unticks the tool while the page runs it:
offered none, the model writes the JSON the schema allows, exactly. The thinker says ``little bright`` for ever,
in its thinking (the template opens it) and, once End thinking has closed it, in its answer.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Locator, Page, Request, Route, expect

from lfmserve.chat.tool_calls import CALL_START
from lfmserve.settings import Settings
from lfmserve.testing.lfm2 import TinyLfm2
from lfmserve.testing.scripted import ScriptedLlama, write_scripted_gguf
from tests.api.test_reasoning_budget import TEMPLATE
from tests.conftest import STATE_TIMEOUT_S, ServerThread, serve
from tests.webui.pages import PREFIX, UnderPrefix, open_chat, set_settings, stop_by, stored, wait_idle

#: The reader's call's argument and end: one token of its vocabulary.
ARGUMENT = '"notes.txt")]'
NOTE = "Remember the milk.\nAnd the bread.\n"
ANSWER = "notes.txt says: Remember the milk."
SCHEMA = {"type": "object", "properties": {"answer": {"const": ANSWER}}, "required": ["answer"]}
#: The only JSON the schema allows, as the model writes it.
ANSWER_JSON = json.dumps({"answer": ANSWER})
QUESTION = "What does notes.txt say?"
#: Greedy: the scripted models' favoured tokens and cycles win every step.
GREEDY = {"temperature": "0", "top_k": "1"}
CYCLE = ("little", "bright")
#: app.js's cap: replies in a row that call tools before the page stops running them.
MAX_TOOL_STEPS = 10
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "webui-agent.png"


class ScriptedReader(ScriptedLlama):
    """A scripted model whose vocabulary also has :data:`ARGUMENT` (no leading blank, unlike its words)."""

    @property
    def vocabulary_spec(self) -> TinyLfm2:
        spec = super().vocabulary_spec
        return dataclasses.replace(spec, words=(*spec.words, ARGUMENT))


def _serve(settings: Settings) -> Iterator[ServerThread]:
    server = serve(settings, wrap=UnderPrefix)
    server.wait_ready()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tools' folder, with the note the reader asks for."""
    folder = tmp_path_factory.mktemp("tools")
    (folder / "notes.txt").write_text(NOTE)
    return folder


@pytest.fixture(scope="module")
def reader(models_dir: Path, root: Path) -> Iterator[ServerThread]:
    spec = ScriptedReader(words=CYCLE, favoured=(CALL_START, ARGUMENT), name="Scripted-Reader")
    model = write_scripted_gguf(models_dir / "scripted-reader.gguf", spec)
    settings = Settings.of(
        model=str(model), ctx_size=4096, parallel=1, threads=1, tools="read_file,get_info", tools_root=str(root)
    )
    yield from _serve(settings)


@pytest.fixture(scope="module")
def thinker(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """A model that thinks until told to stop, and then answers until stopped (``--context-shift``)."""
    model = write_scripted_gguf(models_dir / "scripted-thinker.gguf", ScriptedLlama(words=CYCLE, name="Thinker"))
    template = tmp_path_factory.mktemp("thinker") / "thinking.jinja"
    template.write_text(TEMPLATE)
    settings = Settings.of(
        model=str(model), ctx_size=512, parallel=1, threads=1, chat_template_file=str(template), context_shift=True
    )
    yield from _serve(settings)


def page_url(server: ServerThread) -> str:
    return f"{server.url}{PREFIX}/"


class Traffic:
    """The page's chat and tool-call requests, in order; ``park()`` holds each tool call until the test lets it go."""

    def __init__(self, page: Page) -> None:
        self.chats: list[Request] = []
        self.calls: list[Request] = []
        self.parked: list[Route] = []
        page.on("request", self._seen)

    def _seen(self, request: Request) -> None:
        if request.url.endswith("/v1/chat/completions"):
            self.chats.append(request)
        elif request.url.endswith("/tools") and request.method == "POST":
            self.calls.append(request)

    def park(self, page: Page) -> None:
        def hold(route: Route) -> None:
            if route.request.method == "POST":
                self.parked.append(route)
            else:
                route.continue_()

        page.route("**/tools", hold)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(request.post_data or "null") for request in self.chats]


def wait_for(page: Page, condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (on what Playwright's events record) until it holds."""
    deadline = time.monotonic() + STATE_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, "the page never reached the state waited for"
        page.wait_for_timeout(20)  # Playwright dispatches its events (requests, routes) while it waits


def tool_box(page: Page, name: str) -> Locator:
    return page.locator("#tool-list li", has_text=name).locator("input")


def start_reading(page: Page, server: ServerThread) -> Traffic:
    """Open the page, greedy, with the schema, only read_file ticked; ask the question; return once the page runs
    the model's call (held)."""
    traffic = Traffic(page)
    open_chat(page, page_url(server))
    set_settings(page, **GREEDY, **{"json-schema": json.dumps(SCHEMA)})
    expect(page.locator("#tool-list code")).to_have_text(["read_file", "get_info"])
    tool_box(page, "get_info").uncheck()
    traffic.park(page)
    page.fill("#prompt", QUESTION)
    page.press("#prompt", "Enter")
    wait_for(page, lambda: len(traffic.parked) == 1)
    return traffic


def answer_after_the_call(page: Page, traffic: Traffic) -> None:
    """Untick read_file while its call runs, so the next reply is offered no tool and answers; let the call go."""
    tool_box(page, "read_file").uncheck()
    traffic.parked.pop().continue_()
    wait_idle(page)


def test_without_tools_the_page_shows_none_and_offers_none(page: Page, url: str) -> None:
    traffic = Traffic(page)
    with page.expect_response("**/tools") as listed:
        open_chat(page, url)
    assert listed.value.status == 403  # the server's feature_disabled: no tools, and no error shown
    set_settings(page, max_tokens="2")
    page.fill("#prompt", "Hello")
    page.press("#prompt", "Enter")
    wait_idle(page)
    expect(page.locator("#tools")).to_be_hidden()
    expect(page.locator("#error")).to_be_hidden()
    (body,) = traffic.bodies()
    assert "tools" not in body and body["reasoning_control"] is True


def test_the_models_call_runs_and_its_answer_goes_back_for_the_next_reply(page: Page, reader: ServerThread) -> None:
    listed = httpx.get(f"{reader.url}/tools").json()
    traffic = start_reading(page, reader)
    assert [tool_box(page, name).is_checked() for name in ("read_file", "get_info")] == [True, False]
    expect(page.locator(".message.tool")).to_have_text("read_file is running…")
    answer_after_the_call(page, traffic)

    first, second = traffic.bodies()
    assert first["tools"] == [listed[0]["definition"]]  # read_file's, as GET /tools lists it; get_info unticked
    assert first["reasoning_control"] is True and first["response_format"]["json_schema"]["schema"] == SCHEMA
    (call,) = traffic.calls
    assert call.post_data_json == {"tool": "read_file", "params": {"path": "notes.txt"}}
    expect(page.locator(".message.assistant .tool-call .tool-name")).to_have_text("read_file")
    expect(page.locator(".message.assistant .tool-call .tool-arguments")).to_have_text('{"path": "notes.txt"}')
    result = page.locator(".message.tool")
    expect(result.locator("summary")).to_have_text("read_file answered")
    assert result.locator(".tool-output").text_content() == NOTE  # exactly the file, shown folded
    result.locator("summary").click()
    expect(result.locator(".tool-output")).to_be_visible()

    messages = stored(page)[0]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    call_id = messages[1]["toolCalls"][0]["id"]
    assert call_id and messages[2]["toolCallId"] == call_id
    assert "tools" not in second
    function = {"name": "read_file", "arguments": '{"path": "notes.txt"}'}
    assert second["messages"] == [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function", "function": function}]},
        {"role": "tool", "tool_call_id": call_id, "content": NOTE},
    ]
    expect(page.locator(".message.assistant .content").last).to_have_text(ANSWER_JSON)
    assert messages[3]["content"] == ANSWER_JSON and messages[3]["finishReason"] == "stop"
    expect(page.locator("#error")).to_be_hidden()


def test_a_tool_error_is_shown_and_sent_back_and_the_loop_stops_at_its_cap(
    page: Page, reader: ServerThread, root: Path
) -> None:
    (root / "notes.txt").rename(root / "kept.txt")
    try:
        traffic = Traffic(page)
        open_chat(page, page_url(reader))
        set_settings(page, **GREEDY, **{"json-schema": json.dumps(SCHEMA)})
        tool_box(page, "get_info").uncheck()
        page.fill("#prompt", QUESTION)
        page.press("#prompt", "Enter")
        wait_idle(page)
    finally:
        (root / "kept.txt").rename(root / "notes.txt")
    failure = "Error: cannot stat file: notes.txt"
    expect(page.locator("#error-text")).to_have_text(
        f"The model asked for tools {MAX_TOOL_STEPS} times in a row; send a message to let it go on."
    )
    assert (len(traffic.chats), len(traffic.calls)) == (MAX_TOOL_STEPS, MAX_TOOL_STEPS)
    results = page.locator(".message.tool")
    expect(results.locator("summary")).to_have_text(["read_file failed"] * MAX_TOOL_STEPS)
    assert results.locator(".tool-output").all_text_contents() == [failure] * MAX_TOOL_STEPS
    # each reply after the first was sent the failures so far, as the tool's answers
    for step, body in enumerate(traffic.bodies()):
        answers = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        assert answers == [failure] * step
    assert [m["role"] for m in stored(page)[0]["messages"]] == ["user"] + ["assistant", "tool"] * MAX_TOOL_STEPS


@pytest.mark.parametrize("how", ["Stop", "Escape"])
def test_stop_ends_the_loop_while_a_call_runs(page: Page, reader: ServerThread, how: str) -> None:
    traffic = start_reading(page, reader)
    stop_by(page, how)
    wait_idle(page)
    expect(page.locator(".message.tool summary")).to_have_text("read_file was stopped")
    expect(page.locator(".message.tool .tool-output")).to_have_text("Stopped before the tool answered.")
    traffic.parked.pop().continue_()  # the call the page gave up on answers now: nothing follows it
    # The next request is the user's: the stopped loop sent none between (requests go out in order).
    tool_box(page, "read_file").uncheck()
    page.fill("#prompt", "Go on")
    page.press("#prompt", "Enter")
    wait_idle(page)
    first, second = traffic.bodies()
    assert len(traffic.calls) == 1
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "tool", "user"]
    assert second["messages"][2]["content"] == "Stopped before the tool answered."
    expect(page.locator(".message.assistant .content").last).to_have_text(ANSWER_JSON)


def test_end_thinking_ends_the_reasoning_and_the_answer_follows(page: Page, thinker: ServerThread) -> None:
    traffic = Traffic(page)
    open_chat(page, page_url(thinker))
    set_settings(page, **GREEDY)
    page.fill("#prompt", "Why is the sky blue?")
    page.press("#prompt", "Enter")
    end = page.get_by_role("button", name="End thinking")
    expect(end).to_be_visible()  # the reasoning streams, and no answer yet
    assert page.locator(".message.assistant .content").inner_text() == ""
    with page.expect_response("**/v1/chat/completions/control") as control:
        end.click()
    expect(end).to_be_hidden()
    expect(page.locator(".message.assistant .content")).to_have_text(re.compile(r"(\w+ ){4}"))  # the answer comes
    page.get_by_role("button", name="Stop").click()  # it would go on for ever
    wait_idle(page)
    expect(end).to_be_hidden()

    (body,) = traffic.bodies()
    assert body["reasoning_control"] is True and body["chat_template_kwargs"] == {"enable_thinking": True}
    reply = stored(page)[0]["messages"][-1]
    assert reply["completionId"].startswith("chatcmpl-")
    assert control.value.request.post_data_json == {"id": reply["completionId"], "action": "reasoning_end"}
    assert control.value.json() == {"success": True}
    # the model's cycle, word for word: thinking, then, from the forced end of the thinking, the answer
    thought, answered = reply["reasoning"].split(), reply["content"].split()
    assert thought == [CYCLE[i % 2] for i in range(len(thought))]
    assert answered == [CYCLE[i % 2] for i in range(len(answered))] and len(answered) >= 4
    assert "</think>" not in reply["reasoning"] + reply["content"]


@pytest.mark.skipif(
    not os.environ.get("LFMSERVE_WRITE_SCREENSHOT"), reason="set LFMSERVE_WRITE_SCREENSHOT=1 to write the picture"
)
def test_write_the_agent_screenshot(page: Page, reader: ServerThread) -> None:
    """docs/webui-agent.png: the reader's call, the tool's answer unfolded, the answer that follows, and the tools
    in the settings panel (ticked again: what the test unticked was for the scripted model)."""
    traffic = start_reading(page, reader)
    answer_after_the_call(page, traffic)
    for name in ("read_file", "get_info"):
        tool_box(page, name).check()
    page.locator(".message.tool summary").click()
    page.click("#toggle-sidebar")  # room for the chat beside the settings
    page.locator("#prompt").blur()
    page.screenshot(path=SCREENSHOT)
    assert SCREENSHOT.stat().st_size < 300_000
