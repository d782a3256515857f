"""LoRA adapters over real HTTP (``--lora``, ``GET``/``POST /lora-adapters``, a request's ``lora`` list), on a scripted
llama MoE whose adapter changes which cycle of words it says with the scale (:mod:`lfmserve.testing.scripted`): at 0
its own words, at 0.3, 0.7 and 1.0 one cycle each. The prompt ends with "glass", the third word of the 1.0 cycle,
so every answer starts with the fourth word of the cycle that speaks."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.settings import Settings
from lfmserve.testing.scripted import STORY_MOE, write_scripted_gguf, write_scripted_lora
from tests.conftest import ServerThread

SPEC = STORY_MOE
PROMPT = "Look in thy glass"
#: The answer of 5 greedy tokens at each scale.
BASE = " day little bright wise day"
AT_03 = " friend special thing gifted friend"
AT_07 = " away far from home away"
AT_1 = " sun eye love glass sun"


@pytest.fixture(scope="module")
def files(models_dir: Path) -> tuple[Path, Path]:
    return write_scripted_gguf(models_dir / "scripted-moe.gguf", SPEC), write_scripted_lora(
        models_dir / "scripted-lora.gguf", SPEC
    )


@pytest.fixture(scope="module")
def server(server_factory: Callable[..., ServerThread], files: tuple[Path, Path]) -> ServerThread:
    model, lora = files
    return server_factory(Settings.of(model=str(model), lora=(str(lora),), ctx_size=2048, parallel=4, threads=2))


def complete(server: ServerThread, **fields: Any) -> dict[str, Any]:
    body = {"prompt": PROMPT, "n_predict": 5, "temperature": 0, **fields}
    response = httpx.post(server.url + "/completion", json=body, timeout=60)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def set_scales(server: ServerThread, body: Any) -> httpx.Response:
    return httpx.post(server.url + "/lora-adapters", json=body, timeout=10)


def test_an_adapter_from_lora_is_listed_at_scale_1_and_applied(server: ServerThread, files: tuple[Path, Path]) -> None:
    listed = httpx.get(server.url + "/lora-adapters").json()
    assert listed == [{"id": 0, "path": str(files[1]), "scale": 1.0, "task_name": "", "prompt_prefix": ""}]
    assert complete(server)["content"] == AT_1


def test_post_sets_the_servers_scales(server: ServerThread) -> None:
    try:
        for scale, expected in ((0.0, BASE), (0.3, AT_03), (0.7, AT_07), (1.0, AT_1)):
            assert set_scales(server, [{"id": 0, "scale": scale}]).json() == {"success": True}
            assert httpx.get(server.url + "/lora-adapters").json()[0]["scale"] == scale
            assert complete(server)["content"] == expected, scale
        assert set_scales(server, []).status_code == 200  # adapters not listed go to 0
        assert httpx.get(server.url + "/lora-adapters").json()[0]["scale"] == 0.0
        assert complete(server)["content"] == BASE
    finally:
        set_scales(server, [{"id": 0, "scale": 1.0}])


def test_each_request_runs_under_its_own_scales_side_by_side(server: ServerThread) -> None:
    scales = (0.0, 0.3, 0.7, 1.0, 0.0, 1.0)
    expected = {0.0: BASE, 0.3: AT_03, 0.7: AT_07, 1.0: AT_1}
    with ThreadPoolExecutor(len(scales)) as pool:
        answers = list(pool.map(lambda s: complete(server, lora=[{"id": 0, "scale": s}], n_predict=5), scales))
    assert [a["content"] for a in answers] == [expected[s] for s in scales]
    # The chat route reads the field too, and an empty list means the server's scales (1.0 here).
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0}
    with httpx.Client(base_url=server.url, timeout=60) as client:
        base = client.post("/v1/chat/completions", json={**chat, "lora": [{"id": 0, "scale": 0}]}).json()
        default = client.post("/v1/chat/completions", json={**chat, "lora": []}).json()
    assert base["choices"][0]["message"]["content"] == " little bright"  # after the template's newline: the first word
    assert default["choices"][0]["message"]["content"] == " eye love"


def test_the_prompt_cache_is_kept_apart_per_scales(
    server_factory: Callable[..., ServerThread], files: tuple[Path, Path]
) -> None:
    model, lora = files
    one_slot = server_factory(Settings.of(model=str(model), lora=(str(lora),), ctx_size=1024, parallel=1, threads=2))
    long_prompt = "Look in thy glass and tell the face thou viewest " * 4 + "glass"
    n_prompt = len(
        httpx.post(one_slot.url + "/tokenize", json={"content": long_prompt, "add_special": True}).json()["tokens"]
    )

    def prompt_n(scale: float) -> tuple[int, str]:
        answer = complete(one_slot, prompt=long_prompt, lora=[{"id": 0, "scale": scale}], cache_prompt=True)
        return answer["timings"]["prompt_n"], answer["content"]

    assert prompt_n(1.0) == (n_prompt, AT_1)
    assert prompt_n(1.0) == (1, AT_1)  # the same scales reuse the slot's cells
    assert prompt_n(0.0) == (n_prompt, BASE)  # other scales never do
    assert prompt_n(1.0) == (1, AT_1)  # the 1.0 cells were kept in RAM when 0.0 took the slot


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"id": 0, "scale": 1}, "Request body must be an array"),
        ([{"id": 1, "scale": 1.0}], "invalid LoRA adapter id 1: 1 adapters are loaded"),
        ([{"id": 0, "scale": 1.0}, {"id": 0, "scale": 0.5}], "each LoRA adapter id may appear once"),
        ([{"scale": 1.0}], "Missing required field '0.id'"),
    ],
)
def test_bad_scales_are_400s_that_change_nothing(server: ServerThread, body: Any, message: str) -> None:
    response = set_scales(server, body)
    assert response.status_code == 400 and response.json()["error"]["message"] == message
    assert httpx.get(server.url + "/lora-adapters").json()[0]["scale"] == 1.0


def test_a_request_naming_an_unknown_adapter_is_a_400(server: ServerThread) -> None:
    body = {"prompt": PROMPT, "n_predict": 2, "lora": [{"id": 3, "scale": 1.0}]}
    response = httpx.post(server.url + "/completion", json=body, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "invalid LoRA adapter id 3: 1 adapters are loaded"


def test_lora_scaled_and_init_without_apply(
    server_factory: Callable[..., ServerThread], files: tuple[Path, Path]
) -> None:
    model, lora = files
    scaled = server_factory(Settings.from_argv(["-m", str(model), "--lora-scaled", str(lora), "0.7", "-c", "512"]))
    assert httpx.get(scaled.url + "/lora-adapters").json()[0]["scale"] == 0.7
    assert complete(scaled)["content"] == AT_07
    off = server_factory(
        Settings.from_argv(["-m", str(model), f"--lora-scaled={lora}:0.3", "--lora-init-without-apply", "-c", "512"])
    )
    assert httpx.get(off.url + "/lora-adapters").json()[0]["scale"] == 0.0
    assert complete(off)["content"] == BASE
    assert complete(off, lora=[{"id": 0, "scale": 0.3}])["content"] == AT_03
