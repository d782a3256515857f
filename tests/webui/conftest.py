"""Browser fixtures: Debian's Chromium, driven by Playwright (whose own browser download cannot work here)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

from lfmserve.settings import Settings
from tests.conftest import ServerThread, missing_fixture, serve
from tests.webui.pages import PREFIX, UnderPrefix


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """Chromium, for this folder's tests only: Playwright's sync API keeps an event loop running in the thread while
    it lives, and the tests that a worker of ``pytest -n`` runs after these call ``asyncio.run``."""
    chromium = shutil.which("chromium")
    if chromium is None:
        missing_fixture("no chromium on PATH (apt-get install chromium)")
    with sync_playwright() as playwright:
        # --no-sandbox: the tests run as root, where Chromium's sandbox refuses to start
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page (its own storage), at the size of the README's screenshot; a script error or a Content
    Security Policy refusal on it fails the test."""
    context = browser.new_context(viewport={"width": 1100, "height": 700})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))

    def on_console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text and not _sanitizer_parsing_a_handler(message):
            problems.append(f"CSP: {message.text}")

    page.on("console", on_console)
    yield page
    context.close()
    assert problems == []


#: Where DOMPurify parses the markup it cleans (an inert document: nothing in it runs).
SANITIZER = f"{PREFIX}/vendor/dompurify/purify.min.js"


def _sanitizer_parsing_a_handler(message: ConsoleMessage) -> bool:
    """Chromium 156 reports an inline handler in markup DOMPurify parses (a reply's ``<img onerror>``) as
    refused, though the parsed document is inert: with no policy at all the handler does not run there
    either (measured). That report is the sanitiser at work, not the page breaking its policy."""
    return "inline event handler" in message.text and message.location["url"].endswith(SANITIZER)


@pytest.fixture(scope="package")
def server(tiny_gguf: Path) -> Iterator[ServerThread]:
    """The tiny model, also shown at ``/lfm/`` as a reverse proxy would; 4096 tokens a slot."""
    settings = Settings.of(model=str(tiny_gguf), ctx_size=8192, parallel=2, threads=1)
    server = serve(settings, wrap=UnderPrefix)
    server.wait_ready()
    yield server
    server.stop()


@pytest.fixture
def url(server: ServerThread) -> str:
    """The page behind the prefix."""
    return f"{server.url}{PREFIX}/"


@pytest.fixture(scope="package")
def endless(tiny_llama_gguf: Path) -> Iterator[ServerThread]:
    """A server whose ``ignore_eos`` replies never end by themselves (an attention-only model with
    ``--context-shift``, no max_tokens): only a stop ends one, so a stop however late still finds it running."""
    settings = Settings.of(model=str(tiny_llama_gguf), ctx_size=512, parallel=1, threads=1, context_shift=True)
    server = serve(settings, wrap=UnderPrefix)
    server.wait_ready()
    yield server
    server.stop()
