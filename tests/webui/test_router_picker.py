"""The web UI on a router: a model picker with each model's status; the model chosen is loaded and named in every
request."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.conftest import LFMSERVE, Running, wait_healthy
from tests.router.conftest import entries, router_models  # noqa: F401 - the fixture
from tests.webui.pages import send, wait_idle


def test_the_picker_lists_the_routers_models_and_loads_the_one_chosen(
    page: Page,
    running: list[Running],
    router_models: Path,  # noqa: F811 - the fixture
) -> None:
    assert LFMSERVE is not None
    router = Running(
        [LFMSERVE, "--models-dir", str(router_models / "models"), "--models-preset", str(router_models / "preset.ini")]
        + ["--threads", "1", "--parallel", "1"]
    )
    running.append(router)
    wait_healthy(router.url, router.process)
    page.goto(router.url)
    picker = page.locator("#model-picker")
    expect(picker).to_be_visible()
    expect(page.locator("#send")).to_be_enabled()  # the first model is loaded: its /props read
    assert picker.locator("option").all_inner_texts() == [
        "audio",
        "embed (not loaded)",
        "text (not loaded)",
        "vision (not loaded)",
    ]
    assert entries(router)["audio"]["status"]["value"] == "loaded"
    picker.select_option("text")
    expect(page.locator("#send")).to_be_enabled()
    assert entries(router)["text"]["status"]["value"] == "loaded"
    body = send(page, "hello")
    wait_idle(page)
    assert body["model"] == "text"
    page.reload()  # the choice is remembered
    expect(page.locator("#send")).to_be_enabled()
    assert picker.input_value() == "text"
