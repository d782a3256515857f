"""docs/webui.png, the README's picture: a short conversation with the real Gemma-3-270M, so the text is real.

Written only when ``LFMSERVE_WRITE_SCREENSHOT=1``; the picture is committed, not made by every run. Gemma-3-270M
is a base model, so a question-and-answer template stands in for a chat template, and each answer ends at its
first line break (a ``stop`` the test adds to the page's requests).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, Route

from lfmserve.settings import Settings
from tests.webui.pages import open_chat, send, set_settings

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "webui.png"
QUESTION_AND_ANSWER = (
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}Question: {{ m.content }}\nAnswer:"
    "{% else %} {{ m.content }}\n\n{% endif %}{% endfor %}"
)

pytestmark = pytest.mark.skipif(
    not os.environ.get("LFMSERVE_WRITE_SCREENSHOT"), reason="set LFMSERVE_WRITE_SCREENSHOT=1 to write docs/webui.png"
)


def one_line(route: Route) -> None:
    body = json.loads(route.request.post_data or "{}")
    route.continue_(post_data=json.dumps({**body, "stop": ["\n"]}))


def test_write_the_screenshot(page: Page, server_factory: Any, gemma_gguf: Path) -> None:
    settings = Settings.of(
        model=str(gemma_gguf), chat_template=QUESTION_AND_ANSWER, ctx_size=2048, parallel=1, threads=2
    )
    server = server_factory(settings)
    page.route("**/v1/chat/completions", one_line)
    open_chat(page, server.url + "/")
    set_settings(page, temperature="0", top_k="1", repeat_penalty="1.1", max_tokens="80")
    page.click("#close-settings")
    send(page, "What is photosynthesis?")
    send(page, "Why do plants need it?")
    page.locator("#prompt").blur()
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=SCREENSHOT)
    assert SCREENSHOT.stat().st_size < 300_000
