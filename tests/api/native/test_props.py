"""``POST /props``: allowed only with ``--props``, where llama-server changes nothing yet and says so with success."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from lfmserve.settings import Settings
from tests.conftest import ServerThread, post


def test_changing_props_needs_the_flag(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    closed = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1))
    refused = post(closed, "/props", {"n_predict": 4})
    assert (refused.status_code, refused.json()) == (
        501,
        {
            "error": {
                "code": 501,
                "message": "This server does not support changing global properties. Start it with `--props`",
                "type": "not_supported_error",
            }
        },
    )
    opened = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, threads=1, props=True))
    before = httpx.get(opened.url + "/props").json()
    accepted = post(opened, "/props", {"default_generation_settings": {"params": {"temperature": 2.0}}})
    assert (accepted.status_code, accepted.json()) == (200, {"success": True})
    assert httpx.get(opened.url + "/props").json() == before  # nothing can be changed yet, as in llama-server
