"""What the page makes of answers the random model cannot give: the chat route is intercepted and fulfilled with
a fixed stream (markdown with script in it, reasoning, tool calls, errors), and /props with other capabilities."""

from __future__ import annotations

import json
from typing import Any

import httpx
from playwright.sync_api import Page, Route, expect

from tests.conftest import ServerThread
from tests.webui.pages import TIMINGS, chunk, open_chat, send, set_settings, sse, stat, stored

HOSTILE = (
    'Hi <script>window.pwned = 1</script> there <img src=x onerror="window.pwned = 2">\n\n'
    "[bad](javascript:window.pwned=3) and [good](https://example.com)\n\n"
    "```python\ndef answer():\n    return 42\n```\n"
)


def stream(route: Route, body: str, status: int = 200) -> None:
    route.fulfill(status=status, headers={"Content-Type": "text/event-stream"}, body=body)


def reply_stream(content: str, **first_delta: Any) -> str:
    """The stream of one reply: a role chunk, ``first_delta``, ``content`` in three pieces, usage and timings."""
    thirds = [content[: len(content) // 3], content[len(content) // 3 : 2 * len(content) // 3]]
    pieces = [*thirds, content[2 * len(content) // 3 :]]
    usage = {"prompt_tokens": 12, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 3}}
    return sse(
        chunk({"role": "assistant", "content": None}),
        *([chunk(first_delta)] if first_delta else []),
        *[chunk({"content": piece}) for piece in pieces],
        chunk({}, "stop"),
        {"object": "chat.completion.chunk", "choices": [], "usage": usage, "timings": TIMINGS},
    )


def test_markup_in_a_reply_stays_inert_and_code_is_highlighted(page: Page, url: str) -> None:
    page.route("**/v1/chat/completions", lambda route: stream(route, reply_stream(HOSTILE)))
    open_chat(page, url)
    send(page, "Say something dangerous")
    reply = page.locator(".message.assistant .content")
    assert page.evaluate("window.pwned") is None
    assert page.locator("#messages script").count() == 0
    assert page.evaluate("document.querySelectorAll('[onerror]').length") == 0
    expect(reply.locator("img")).to_have_attribute("src", "x")  # the image is left, without its handler
    assert reply.get_by_text("bad").get_attribute("href") is None  # javascript: links lose their target
    good = reply.get_by_role("link", name="good")
    assert (good.get_attribute("href"), good.get_attribute("rel")) == ("https://example.com", "noopener noreferrer")
    assert good.get_attribute("target") == "_blank"
    keyword = reply.locator("pre code.hljs.language-python .hljs-keyword").first
    expect(keyword).to_have_text("def")
    assert stored(page)[0]["messages"][-1]["content"] == HOSTILE  # the text itself is kept as it came
    assert (stat(page, "promptTokens"), stat(page, "cachedTokens"), stat(page, "completionTokens")) == (12, 3, 5)
    assert (stat(page, "promptPerSecond"), stat(page, "predictedPerSecond")) == (900, 250)
    expect(page.locator("#context-text")).to_have_text("17 / 4096")  # prompt + generated tokens of n_ctx


def test_reasoning_is_collapsed_and_tool_calls_show_their_name_and_arguments(page: Page, url: str) -> None:
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    arguments = {"index": 0, "function": {"arguments": '{"city": "Paris"}'}}
    body = sse(
        chunk({"reasoning_content": "The user wants "}),
        chunk({"reasoning_content": "the weather."}),
        chunk({"tool_calls": [call]}),
        chunk({"tool_calls": [arguments]}),
        chunk({}, "tool_calls"),
    )
    page.route("**/v1/chat/completions", lambda route: stream(route, body))
    open_chat(page, url)
    send(page, "Weather in Paris?")
    reasoning = page.locator(".message.assistant details.reasoning")
    assert reasoning.get_attribute("open") is None
    expect(reasoning.locator(".reasoning-text")).to_be_hidden()
    reasoning.locator("summary").click()
    expect(reasoning.locator(".reasoning-text")).to_have_text("The user wants the weather.")
    expect(page.locator(".tool-call .tool-name")).to_have_text("get_weather")
    expect(page.locator(".tool-call .tool-arguments")).to_have_text('{"city": "Paris"}')


def test_errors_are_shown_and_the_chat_stays_usable(page: Page, server: ServerThread, url: str) -> None:
    answers = iter(
        [
            lambda route: route.fulfill(status=400, json={"error": {"code": 400, "message": "bad request here"}}),
            lambda route: stream(
                route, sse(chunk({"content": "partial"}), tail='error: {"error": {"message": "x"}}\n\n')
            ),
            lambda route: stream(route, sse(chunk({"content": "more"}), {"error": {"message": "data error"}})),
            lambda route: route.continue_(),  # the real server
        ]
    )
    page.route("**/v1/chat/completions", lambda route: next(answers)(route))
    open_chat(page, url)
    set_settings(page, temperature="0", top_k="1", max_tokens="3")  # greedy: the server answers it again the same
    send(page, "one")
    expect(page.locator("#error-text")).to_have_text("bad request here")
    expect(page.locator(".message.assistant")).to_have_count(0)  # nothing came: no empty reply is kept
    send(page, "two")
    expect(page.locator("#error-text")).to_have_text("x")
    expect(page.locator(".message.assistant .content").last).to_have_text("partial")  # what came is kept
    send(page, "three")
    expect(page.locator("#error-text")).to_have_text("data error")
    body = send(page, "four")
    expect(page.locator("#error")).to_be_hidden()
    whole = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=whole, timeout=30).json()
    assert stored(page)[0]["messages"][-1]["content"] == answer["choices"][0]["message"]["content"]


def test_thinking_and_attachments_follow_the_servers_props(page: Page, server: ServerThread, url: str) -> None:
    props = httpx.get(f"{server.url}/props").json()
    props["chat_template"] += "{% if enable_thinking %}{% endif %}"
    props["modalities"] = {"vision": True, "audio": True}
    page.route("**/props", lambda route: route.fulfill(json=props))
    page.route("**/v1/chat/completions", lambda route: stream(route, reply_stream("ok")))
    open_chat(page, url)
    assert page.locator("#file-input").get_attribute("accept") == "image/*,audio/*"
    expect(page.locator("#attach")).to_be_visible()
    set_settings(page, enable_thinking=False)
    page.set_input_files("#file-input", [{"name": "a.wav", "mimeType": "audio/wav", "buffer": b"RIFF0000WAVE"}])
    expect(page.locator("#attachments audio")).to_have_count(1)
    body = send(page, "Listen")
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    data = "UklGRjAwMDBXQVZF"  # the file's bytes, base64
    assert body["messages"][-1]["content"] == [
        {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}},
        {"type": "text", "text": "Listen"},
    ]
    expect(page.locator("#attachments audio")).to_have_count(0)
    expect(page.locator(".message.user audio")).to_have_count(1)


def test_a_server_without_media_takes_no_attachment(page: Page, url: str) -> None:
    open_chat(page, url)
    expect(page.locator("#attach")).to_be_hidden()
    page.evaluate(
        """() => {
            const data = new DataTransfer();
            data.items.add(new File(["x"], "cat.png", { type: "image/png" }));
            document.querySelector("main").dispatchEvent(new DragEvent("drop", { dataTransfer: data }));
        }"""
    )
    expect(page.locator("#error-text")).to_contain_text("cat.png cannot be attached")
    assert json.loads(page.evaluate("JSON.stringify([...document.querySelectorAll('#attachments > *')])")) == []


def test_at_phone_width_the_sidebar_collapses_over_the_chat(page: Page, url: str) -> None:
    page.set_viewport_size({"width": 390, "height": 800})
    open_chat(page, url)
    toggle = page.get_by_role("button", name="Conversations")
    expect(page.locator("#sidebar")).to_be_hidden()
    assert toggle.get_attribute("aria-expanded") == "false"
    toggle.click()
    expect(page.locator("#sidebar")).to_be_visible()
    assert toggle.get_attribute("aria-expanded") == "true"
    page.keyboard.press("Escape")
    expect(page.locator("#sidebar")).to_be_hidden()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing wider than the phone
