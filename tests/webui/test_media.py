"""An image attached in the page reaches the tiny LFM2-VL model through its projector."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from playwright.sync_api import Page, expect

from tests.conftest import ServerThread, vl_settings
from tests.webui.pages import open_chat, send, set_settings, stat, stored


@pytest.fixture(scope="module")
def vl_server(server_factory: Any, vl_gguf: Path, mmproj_gguf: Path) -> ServerThread:
    server: ServerThread = server_factory(vl_settings(vl_gguf, mmproj_gguf))
    return server


def png(width: int = 64, height: int = 48) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 40, 90)).save(out, format="PNG")
    return out.getvalue()


def test_an_attached_image_is_sent_as_an_image_url_and_counted_in_the_prompt(
    page: Page, vl_server: ServerThread
) -> None:
    open_chat(page, vl_server.url + "/")
    set_settings(page, max_tokens="4")
    send(page, "What is this?")
    text_only = stat(page, "promptTokens")

    page.click("#new-chat")
    expect(page.locator("#attach")).to_be_visible()  # /props says the model sees images
    page.set_input_files("#file-input", [{"name": "red.png", "mimeType": "image/png", "buffer": png()}])
    expect(page.get_by_role("img", name="red.png")).to_be_visible()  # the preview, before sending
    body = send(page, "What is this?")
    image_part, text_part = body["messages"][-1]["content"]
    assert image_part["type"] == "image_url" and image_part["image_url"]["url"].startswith("data:image/png;base64,")
    assert text_part == {"type": "text", "text": "What is this?"}
    assert stat(page, "completionTokens") > 0  # the reply came
    assert stat(page, "promptTokens") > text_only  # the image's tokens
    expect(page.locator(".message.user").get_by_role("img", name="red.png")).to_be_visible()
    assert stored(page)[0]["messages"][0]["attachments"][0]["dataUrl"] == image_part["image_url"]["url"]
