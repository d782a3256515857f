"""What the web UI tests do on the page, a reverse proxy's path prefix, and fake streams for intercepted routes."""

from __future__ import annotations

import json
from typing import Any

from playwright.sync_api import Page, expect
from starlette.types import ASGIApp, Receive, Scope, Send

#: Where :class:`UnderPrefix` shows the app.
PREFIX = "/lfm"
#: A fake ``timings`` object, as llama-server sends on a stream's last event.
TIMINGS = {
    "cache_n": 3,
    "prompt_n": 9,
    "prompt_ms": 10.0,
    "prompt_per_second": 900.0,
    "predicted_n": 5,
    "predicted_ms": 20.0,
    "predicted_per_second": 250.0,
}


class UnderPrefix:
    """The app as a reverse proxy shows it at ``/lfm/``, stripping the prefix before passing a request on.

    Paths without the prefix pass too (the fixtures' health checks use them); a test asserts that the page
    asked for none, which is what shows that every URL the UI uses is relative to the page.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if path.startswith(PREFIX + "/"):
            scope = {**scope, "path": path[len(PREFIX) :], "raw_path": path[len(PREFIX) :].encode()}
        await self.app(scope, receive, send)


def open_chat(page: Page, url: str) -> None:
    """Load the page and wait for it to have read /props (Send is enabled then)."""
    page.goto(url)
    expect(page.locator("#send")).to_be_enabled()


def set_settings(page: Page, **fields: str | bool) -> None:
    """Fill settings fields by id (a bool ticks a checkbox); the panel opens first."""
    if page.locator("#settings").is_hidden():
        page.click("#toggle-settings")
    for name, value in fields.items():
        field = page.locator(f"#{name}")
        if isinstance(value, bool):
            field.set_checked(value)
        else:
            field.fill(value)


def send(page: Page, text: str) -> dict[str, Any]:
    """Type ``text``, press Enter, wait for the reply to end; the request body the page sent."""
    with page.expect_request("**/v1/chat/completions") as request:
        page.fill("#prompt", text)
        page.press("#prompt", "Enter")
    wait_idle(page)
    body: dict[str, Any] = request.value.post_data_json
    return body


def stop_by(page: Page, how: str) -> None:
    """End what runs as a user does: the Stop button (``"Stop"``) or the Esc key (``"Escape"``)."""
    if how == "Stop":
        page.get_by_role("button", name="Stop").click()
    else:
        page.keyboard.press("Escape")


def wait_idle(page: Page) -> None:
    expect(page.locator("#stop")).to_be_hidden()
    expect(page.locator("#messages")).to_have_attribute("aria-busy", "false")


def stored(page: Page) -> list[dict[str, Any]]:
    """The conversations in the page's localStorage, the last changed first."""
    conversations: list[dict[str, Any]] = page.evaluate(
        "Object.keys(localStorage).filter((k) => k.startsWith('lfmserve.conversation.'))"
        ".map((k) => JSON.parse(localStorage.getItem(k))).sort((a, b) => b.updated - a.updated)"
    )
    return conversations


def stat(page: Page, name: str) -> float:
    """A number in the stats under the last reply (``promptTokens``, ``cachedTokens``, ``completionTokens``...)."""
    return float(page.locator(f".message.assistant >> nth=-1 >> [data-stat={name}] b").inner_text())


def rendered(page: Page, markdown: str) -> str:
    """``markdown`` as the page renders a reply (its own markdown module, so the same marked and DOMPurify)."""
    html: str = page.evaluate(
        "async (text) => (await import(new URL('markdown.js', document.baseURI))).renderMarkdown(text)", markdown
    )
    return html


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    """A chat.completion.chunk with one choice."""
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return {"object": "chat.completion.chunk", "choices": [choice], **extra}


def sse(*events: dict[str, Any], tail: str = "data: [DONE]\n\n") -> str:
    """An SSE body: each event as ``data: {json}``, then ``tail``."""
    return "".join(f"data: {json.dumps(event)}\n\n" for event in events) + tail
