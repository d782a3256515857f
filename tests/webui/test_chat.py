"""The web UI in Chromium against a real lfmserve (the tiny random model), shown behind a path prefix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, Request, expect

from tests.conftest import ServerThread, wait_until
from tests.webui.pages import PREFIX, open_chat, rendered, send, set_settings, stat, stop_by, stored, wait_idle

#: A greedy, fixed-length request: the page and the server must agree on every token.
GREEDY = {"temperature": "0", "top_k": "1", "max_tokens": "24"}


def assert_reply_is_the_servers(page: Page, server: ServerThread, body: dict[str, Any]) -> dict[str, Any]:
    """The last reply on the page is what the server answers to the same request, rendered as the page renders it;
    its stats are the server's counts. Returns the server's answer."""
    whole = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=whole, timeout=30).json()
    content = answer["choices"][0]["message"]["content"]
    assert stored(page)[0]["messages"][-1]["content"] == content
    shown = page.locator(".message.assistant .content").last.inner_html()
    assert shown == rendered(page, content)
    assert stat(page, "promptTokens") == answer["usage"]["prompt_tokens"]
    assert stat(page, "completionTokens") == answer["usage"]["completion_tokens"]
    return answer


def test_a_streamed_reply_is_the_servers_answer_and_regenerate_and_edit_resend(
    page: Page, server: ServerThread, url: str
) -> None:
    asked: list[Request] = []
    page.on("request", lambda request: asked.append(request))
    open_chat(page, url)
    set_settings(page, **GREEDY)
    body = send(page, "Hello there")
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["timings_per_token"] is True
    assert (body["temperature"], body["top_k"], body["max_tokens"]) == (0, 1, 24)
    assert body["messages"] == [{"role": "user", "content": "Hello there"}]
    assert "chat_template_kwargs" not in body  # the tiny model's template has no enable_thinking
    assert page.locator("#thinking-row").is_hidden()
    assert_reply_is_the_servers(page, server, body)
    assert page.locator("#messages").get_attribute("aria-live") == "polite"

    page.get_by_role("button", name="Regenerate").click()
    wait_idle(page)
    assert page.locator(".message").count() == 2  # the reply was replaced, not added to
    assert_reply_is_the_servers(page, server, body)
    assert stat(page, "cachedTokens") > 0  # the same prompt again: the prompt cache served it

    page.get_by_role("button", name="Edit").click()
    with page.expect_request("**/v1/chat/completions") as edited:
        page.get_by_label("Edit the message").fill("Goodbye")
        page.get_by_label("Edit the message").press("Enter")
    wait_idle(page)
    assert edited.value.post_data_json["messages"] == [{"role": "user", "content": "Goodbye"}]
    assert [m["content"] for m in stored(page)[0]["messages"]][0] == "Goodbye"
    assert page.locator(".message").count() == 2
    assert_reply_is_the_servers(page, server, edited.value.post_data_json)
    # every URL the page used is relative to it: none escaped the reverse proxy's prefix
    assert [r.url for r in asked if not r.url.startswith(url)] == []


@pytest.mark.parametrize("how", ["Stop", "Escape"])
def test_stop_aborts_the_stream_and_the_server_frees_the_slot(page: Page, endless: ServerThread, how: str) -> None:
    open_chat(page, f"{endless.url}{PREFIX}/")
    set_settings(page, ignore_eos=True)  # and no max_tokens: on this server only the stop ends the reply
    with page.expect_request("**/v1/chat/completions") as request:
        page.fill("#prompt", "Count for a long time")
        page.press("#prompt", "Enter")
    body = request.value.post_data_json
    assert body["ignore_eos"] is True and "max_tokens" not in body
    expect(page.locator(".message.assistant [data-stat=completionTokens]")).to_be_visible()  # tokens arrive
    assert page.locator("#stop").is_visible()
    stop_by(page, how)
    wait_idle(page)
    expect(page.locator(".message.assistant .stat.stopped")).to_have_text("stopped")
    assert stat(page, "completionTokens") >= 1
    # The reply never ends by itself: the slot goes idle only because the server cancelled it.
    wait_until(
        lambda: not any(slot["is_processing"] for slot in httpx.get(f"{endless.url}/slots").json()),
        "the generation ends after the page stopped it",
    )
    assert stored(page)[0]["messages"][-1]["stopped"] is True


def test_conversations_survive_a_reload_and_are_renamed_exported_and_deleted(page: Page, url: str) -> None:
    open_chat(page, url)
    set_settings(page, max_tokens="4")
    send(page, "First conversation")
    page.click("#new-chat")
    send(page, "Second conversation")
    page.reload()
    expect(page.locator("#send")).to_be_enabled()
    titles = page.locator("#conversations .title")
    expect(titles).to_have_text(["Second conversation", "First conversation"])
    titles.nth(1).click()
    expect(page.locator(".message.user .content")).to_have_text(["First conversation"])
    assert stat(page, "completionTokens") <= 4

    page.get_by_role("button", name="Rename First conversation").click()
    page.get_by_label("New name").fill("Renamed")
    page.get_by_label("New name").press("Enter")
    page.reload()
    expect(page.locator("#conversations .title")).to_have_text(["Renamed", "Second conversation"])

    with page.expect_download() as download:
        page.get_by_role("button", name="Export Renamed").click()
    exported = json.loads(Path(download.value.path()).read_text())
    assert exported == next(c for c in stored(page) if c["title"] == "Renamed")

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete Second conversation").click()
    expect(page.locator("#conversations .title")).to_have_text(["Renamed"])
    assert [c["title"] for c in stored(page)] == ["Renamed"]


def test_an_invalid_json_schema_shows_an_error_and_sends_nothing(page: Page, url: str) -> None:
    sent: list[Request] = []
    open_chat(page, url)
    page.on("request", lambda request: sent.append(request) if "chat/completions" in request.url else None)
    set_settings(page, **{"json-schema": "{not json"})
    expect(page.locator("#json-schema-error")).to_contain_text("The JSON schema is not valid")
    page.fill("#prompt", "Give me JSON")
    page.press("#prompt", "Enter")
    expect(page.locator("#error-text")).to_contain_text("The JSON schema is not valid")
    assert page.locator("#prompt").input_value() == "Give me JSON"  # kept, to send once the schema is fixed
    assert sent == [] and stored(page) == []

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    set_settings(page, **{"json-schema": json.dumps(schema), "max_tokens": "64"})
    body = send(page, "Give me JSON")
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
    assert isinstance(json.loads(stored(page)[0]["messages"][-1]["content"])["n"], int)  # the server kept to it


def test_the_page_loads_under_300_kb_gzipped(page: Page, url: str) -> None:
    """What the page loads, gzipped; how fast is a measure (printed here), not a verdict: a busy machine slows it."""
    responses = []
    page.on("response", lambda response: responses.append(response))
    open_chat(page, url)
    load_ms = page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
    assert load_ms > 0  # the load event fired
    static = [r for r in responses if "/v1/" not in r.url and not r.url.endswith(("/props", "/tools"))]
    assert len(static) >= 10 and all(r.status == 200 for r in static)
    assert all(r.headers.get("content-encoding") == "gzip" for r in static)
    transferred = sum(r.request.sizes()["responseBodySize"] for r in static)
    assert transferred < 300_000
    print(f"web UI: load event at {load_ms:.0f} ms, {len(static)} files, {transferred} bytes gzipped")
