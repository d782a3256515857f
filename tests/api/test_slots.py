"""Slots over HTTP: /slots, slot save/restore/erase, /metrics, waiting, the queue bound, disconnects."""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from lfmserve.settings import Settings
from tests.conftest import STATE_TIMEOUT_S, ServerThread, wait_until

CHAT = {"messages": [{"role": "user", "content": "Hello there"}], "temperature": 0, "max_tokens": 4}

#: A reply that never ends by itself on an :func:`endless` or :func:`endless_four` server (no max_tokens): only its
#: client ends it.
ENDLESS = {"messages": [{"role": "user", "content": "Go on forever."}], "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def save_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("slots")


@pytest.fixture(scope="module")
def server(server_factory: Callable[..., ServerThread], tiny_gguf: Path, save_dir: Path) -> ServerThread:
    return server_factory(
        Settings.of(
            model=str(tiny_gguf), ctx_size=4096, parallel=4, threads=2, metrics=True, slot_save_path=str(save_dir)
        )
    )


def test_slots_report_context_cache_and_checkpoints(server: ServerThread) -> None:
    httpx.post(server.url + "/v1/chat/completions", json={**CHAT, "id_slot": 1}, timeout=60)
    slots = httpx.get(server.url + "/slots").json()
    assert [s["id"] for s in slots] == [0, 1, 2, 3] and all(s["n_ctx"] == 1024 for s in slots)
    assert all(s["is_processing"] is False for s in slots)
    one = slots[1]
    assert one["n_prompt_tokens"] > 0 and one["checkpoints"] and one["checkpoints_size"] > 0
    assert one["checkpoints"][-1]["n_tokens"] <= one["n_prompt_tokens"]
    end = one["checkpoints"][-1]  # the end of the prompt, kept with its logits (475 floats for the tiny vocabulary)
    assert end["logits"] is True and end["size"] > 4 * 475 and one["checkpoints_size"] >= end["size"]
    assert httpx.get(server.url + "/slots?fail_on_no_slot=1").status_code == 200


def test_slot_save_restore_erase(server: ServerThread) -> None:
    ask = [{"role": "user", "content": "Keep this in slot two"}]  # a prompt no other slot holds
    body = {**CHAT, "messages": ask, "id_slot": 2, "max_tokens": 1}
    first = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60).json()
    saved = httpx.post(server.url + "/slots/2?action=save", json={"filename": "s2.bin"}).json()
    assert saved["id_slot"] == 2 and saved["n_saved"] == first["usage"]["prompt_tokens"] and saved["n_written"] > 0
    assert httpx.post(server.url + "/slots/2?action=erase").json() == {"id_slot": 2, "n_erased": saved["n_saved"]}
    restored = httpx.post(server.url + "/slots/2?action=restore", json={"filename": "s2.bin"}).json()
    assert (restored["n_restored"], restored["n_read"]) == (saved["n_saved"], saved["n_written"])
    # The conversation goes on from exactly where the saved slot stopped: all of it is reused.
    reply = {"role": "assistant", "content": first["choices"][0]["message"]["content"]}
    longer = [*ask, reply, {"role": "user", "content": "And then?"}]
    again = httpx.post(server.url + "/v1/chat/completions", json={**body, "messages": longer}, timeout=60).json()
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == saved["n_saved"]


@pytest.mark.parametrize("filename", ["../escape.bin", "a/b.bin", ".hidden", "", "x" * 300])
def test_slot_file_names_are_validated(server: ServerThread, filename: str) -> None:
    response = httpx.post(server.url + "/slots/0?action=save", json={"filename": filename})
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"


def test_a_planted_link_is_replaced_on_save_and_refused_on_restore(
    server: ServerThread, save_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    (save_dir / "planted.bin").symlink_to(outside)
    saved = httpx.post(server.url + "/slots/1?action=save", json={"filename": "planted.bin"})
    assert saved.status_code == 200
    assert outside.read_text() == "keep me"  # nothing was written through the link
    assert (save_dir / "planted.bin").is_file() and not (save_dir / "planted.bin").is_symlink()
    assert sorted(p.name for p in save_dir.iterdir() if p.name.endswith(".part")) == []  # no partial file left
    (save_dir / "linked.bin").symlink_to(save_dir / "planted.bin")  # a link to a real saved slot
    restored = httpx.post(server.url + "/slots/1?action=restore", json={"filename": "linked.bin"})
    assert restored.status_code == 400
    assert restored.json()["error"]["message"] == "linked.bin is not a regular file in the slot folder"


def test_bad_slot_files_are_400s_that_name_the_file_only(server: ServerThread, save_dir: Path) -> None:
    (save_dir / "folder.bin").mkdir()
    onto_folder = httpx.post(server.url + "/slots/0?action=save", json={"filename": "folder.bin"})
    assert (onto_folder.status_code, onto_folder.json()["error"]) == (
        400,
        {
            "code": 400,
            "message": "cannot save slot 0 to folder.bin: it is a directory",
            "type": "invalid_request_error",
            "param": "filename",
        },
    )
    httpx.post(server.url + "/v1/chat/completions", json={**CHAT, "id_slot": 3}, timeout=60)
    assert httpx.post(server.url + "/slots/3?action=save", json={"filename": "good.bin"}).status_code == 200
    (save_dir / "foreign.bin").write_bytes(b"not a slot file at all" * 10)
    (save_dir / "cut.bin").write_bytes((save_dir / "good.bin").read_bytes()[:100])
    for name in ("foreign.bin", "cut.bin"):
        response = httpx.post(server.url + "/slots/3?action=restore", json={"filename": name})
        assert (response.status_code, response.json()["error"]["message"]) == (
            400,
            f"{name} is not a saved slot of this model, or it is larger than slot 3",
        )
        assert str(save_dir) not in response.text
    good = httpx.post(server.url + "/slots/3?action=restore", json={"filename": "good.bin"})
    assert good.status_code == 200 and good.json()["n_restored"] > 0  # and the slot still works


def test_slot_action_errors(server: ServerThread) -> None:
    assert httpx.post(server.url + "/slots/0?action=explode").status_code == 400
    assert httpx.post(server.url + "/slots/9?action=erase").status_code == 400
    missing = httpx.post(server.url + "/slots/0?action=restore", json={"filename": "nothing.bin"})
    assert missing.status_code == 404


def stream_chat(server: ServerThread, content: str, results: list[str], errors: list[str]) -> None:
    body = {
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": 64,
        "ignore_eos": True,
        "stream": True,
        "cache_prompt": False,
    }
    try:
        with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=STATE_TIMEOUT_S) as response:
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        chunks = [json.loads(line[6:]) for line in lines[:-1]]
        results.append(chunks[-1]["choices"][0]["finish_reason"])
    except Exception as exc:  # collected for the assertion below
        errors.append(repr(exc))


def metric(server: ServerThread, name: str) -> float:
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


@pytest.fixture(scope="module")
def endless_four(server_factory: Callable[..., ServerThread], tiny_llama_gguf: Path) -> ServerThread:
    """Four slots on an attention-only model with ``--context-shift``: an :data:`ENDLESS` reply holds its slot until
    its client leaves."""
    settings = Settings.of(
        model=str(tiny_llama_gguf), ctx_size=2048, parallel=4, threads=1, context_shift=True, metrics=True
    )
    return server_factory(settings)


def n_processing(server: ServerThread) -> int:
    return sum(slot["is_processing"] for slot in httpx.get(server.url + "/slots").json())


def test_eight_streams_on_four_slots_all_complete_and_four_wait(endless_four: ServerThread) -> None:
    """Four endless streams hold the four slots, so the four sent next wait, however slow the machine; once the
    first four's clients leave, the waiting four get the slots and run to their end."""
    server = endless_four
    deferred_before = metric(server, "lfmserve:requests_deferred_total")
    results: list[str] = []
    errors: list[str] = []
    with contextlib.ExitStack() as holding:
        for i in range(4):
            body = {**ENDLESS, "messages": [{"role": "user", "content": f"User {i} goes on."}], "stream": True}
            url = server.url + "/v1/chat/completions"
            held = holding.enter_context(httpx.stream("POST", url, json=body, timeout=STATE_TIMEOUT_S))
            assert held.status_code == 200
        wait_until(lambda: n_processing(server) == 4, "the first four streams hold the four slots")
        waiting = [
            threading.Thread(target=stream_chat, args=(server, f"User {i} asks a question.", results, errors))
            for i in range(4, 8)
        ]
        for t in waiting:
            t.start()
        wait_until(lambda: metric(server, "llamacpp:requests_deferred") == 4, "the four others wait for a slot")
        assert n_processing(server) == 4 and results == [] and errors == []
    for t in waiting:  # the first four's clients have left: their slots go to the waiting ones
        t.join(timeout=STATE_TIMEOUT_S)
    assert errors == [] and results == ["length"] * 4
    assert metric(server, "lfmserve:requests_deferred_total") - deferred_before == 4
    wait_until(lambda: n_processing(server) == 0, "every slot is free again")
    assert metric(server, "llamacpp:requests_deferred") == 0 and metric(server, "llamacpp:requests_processing") == 0


def test_metrics_use_llama_server_names(server: ServerThread) -> None:
    httpx.post(server.url + "/v1/chat/completions", json=CHAT, timeout=60)  # something to count
    text = httpx.get(server.url + "/metrics").text
    for name in (
        "llamacpp:prompt_tokens_total",
        "llamacpp:tokens_predicted_total",
        "llamacpp:prompt_seconds_total",
        "llamacpp:tokens_predicted_seconds_total",
        "llamacpp:n_decode_total",
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
        "lfmserve:prompt_cache_hits_total",
        "lfmserve:checkpoints_saved_total",
    ):
        assert f"\n{name} " in text
    assert (
        metric(server, "llamacpp:tokens_predicted_total") > 0 and metric(server, "lfmserve:checkpoints_saved_total") > 0
    )


@pytest.fixture(scope="module")
def endless(server_factory: Callable[..., ServerThread], tiny_llama_gguf: Path) -> ServerThread:
    """One slot (and a queue of one) on an attention-only model with ``--context-shift``: an :data:`ENDLESS`
    reply runs until its client leaves, so however late the test acts, the reply is still running."""
    settings = Settings.of(
        model=str(tiny_llama_gguf), ctx_size=512, parallel=1, threads=1, context_shift=True, max_queue=1, metrics=True
    )
    return server_factory(settings)


def processing(server: ServerThread) -> bool:
    return bool(httpx.get(server.url + "/slots").json()[0]["is_processing"])


def assert_freed(server: ServerThread) -> None:
    """The slot goes idle (only a cancel ends an endless reply) and then serves the next request."""
    wait_until(lambda: not processing(server), "the generation stops after the client left")
    answer = httpx.post(server.url + "/v1/chat/completions", json=CHAT, timeout=STATE_TIMEOUT_S).json()
    assert (answer["choices"][0]["finish_reason"], answer["usage"]["completion_tokens"]) == ("length", 4)


def test_a_client_that_disconnects_frees_its_slot(endless: ServerThread) -> None:
    body = {**ENDLESS, "stream": True}
    with httpx.stream("POST", endless.url + "/v1/chat/completions", json=body, timeout=STATE_TIMEOUT_S) as response:
        for i, _ in enumerate(response.iter_lines()):
            if i > 6:
                break
    assert_freed(endless)


def test_a_client_that_stops_waiting_for_a_whole_answer_frees_its_slot(endless: ServerThread) -> None:
    """The client sends a non-streaming request and hangs up without an answer once the slot is generating it."""
    host, port = endless.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=STATE_TIMEOUT_S)
    try:
        connection.request("POST", "/v1/chat/completions", json.dumps(ENDLESS), {"Content-Type": "application/json"})
        wait_until(lambda: processing(endless), "the request is generating")
    finally:
        connection.close()
    assert_freed(endless)


def test_disabled_endpoints_answer_501(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    bare = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=512, parallel=1, slots_endpoint=False))
    for method, path in (("GET", "/slots"), ("GET", "/metrics"), ("POST", "/slots/0?action=erase")):
        response = httpx.request(method, bare.url + path)
        assert response.status_code == 501 and response.json()["error"]["type"] == "not_supported_error"


def test_a_full_queue_answers_503(endless: ServerThread) -> None:
    # The first streams until the test closes it: it holds the only slot for as long as the test needs.
    first_body = {**ENDLESS, "stream": True}
    statuses: list[int] = []

    def call(body: dict[str, object]) -> None:
        statuses.append(httpx.post(endless.url + "/v1/chat/completions", json=body, timeout=120).status_code)

    with httpx.stream("POST", endless.url + "/v1/chat/completions", json=first_body, timeout=120) as first:
        assert first.status_code == 200
        wait_until(lambda: processing(endless), "the first request runs")
        second = threading.Thread(target=call, args=(CHAT,))
        second.start()
        wait_until(lambda: metric(endless, "llamacpp:requests_deferred") == 1, "the second request waits in the queue")
        refused = httpx.post(endless.url + "/v1/chat/completions", json=CHAT, timeout=60)
        assert refused.status_code == 503 and refused.json()["error"]["type"] == "unavailable_error"
        assert processing(endless) and statuses == []
    second.join(timeout=120)  # the first one's client has left: its slot goes to the queued one
    assert statuses == [200]
    assert metric(endless, "llamacpp:requests_deferred") == 0
