"""With ``--api-key`` the page loads without a key, asks for it once when an API call is refused, and sends it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, Response, expect

from lfmserve.settings import Settings
from tests.conftest import ServerThread
from tests.webui.pages import send, stat

KEY = "sesame"


@pytest.fixture(scope="module")
def keyed_server(server_factory: Any, tiny_gguf: Path) -> ServerThread:
    server: ServerThread = server_factory(Settings.of(model=str(tiny_gguf), api_key=(KEY,), threads=1))
    return server


def test_the_key_dialog_appears_and_the_key_makes_the_chat_work(page: Page, keyed_server: ServerThread) -> None:
    responses: list[Response] = []
    page.on("response", lambda response: responses.append(response))
    page.goto(keyed_server.url + "/")
    dialog = page.get_by_role("dialog", name="API key")
    expect(dialog).to_be_visible()  # GET /props was refused
    static = [r for r in responses if not r.url.endswith("/props")]
    assert len(static) >= 10 and all(r.status == 200 for r in static)  # the page's own files need no key
    assert all("authorization" not in r.request.headers for r in static)

    page.get_by_label("Key", exact=True).fill("wrong")
    page.get_by_role("button", name="Use key").click()
    expect(dialog).to_contain_text("The server refused that key.")  # asked again, saying why
    page.get_by_label("Key", exact=True).fill(KEY)
    page.get_by_role("button", name="Use key").click()
    expect(dialog).to_be_hidden()
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator("#model-name")).to_have_text("tiny-lfm2.gguf")  # /props answered

    page.locator("#toggle-settings").click()
    page.locator("#max_tokens").fill("3")
    with page.expect_request("**/v1/chat/completions") as chat:
        send(page, "Hello")
    assert chat.value.headers["authorization"] == f"Bearer {KEY}"
    assert stat(page, "completionTokens") > 0
    assert page.evaluate("sessionStorage.getItem('lfmserve.apiKey')") == KEY
    assert page.evaluate("localStorage.getItem('lfmserve.apiKey')") is None  # never kept past the tab
