"""llama-server's chat extras over real HTTP: ``n`` choices, ``__verbose``, ``return_progress``, prefill and the
``continue_final_message`` conflict, the unprefixed token-count route."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from lfmserve.settings import Settings
from tests.conftest import GREEDY, SEED_CHAT, ServerThread, post, sse_events


@pytest.fixture(scope="module")
def llama_server(server_factory: Callable[..., ServerThread], tiny_llama_gguf: Path) -> ServerThread:
    """One slot, 16-token batches: a prompt prefills in several chunks (attention-only: a repeat reuses all
    but its last token, as in llama-server)."""
    settings = Settings.of(model=str(tiny_llama_gguf), ctx_size=512, parallel=1, batch_size=16, ubatch_size=16)
    return server_factory(settings)


def test_n_choices_are_answered_with_one_usage_counting_them_all(tiny_server: ServerThread) -> None:
    data = post(tiny_server, "/v1/chat/completions", {**SEED_CHAT, **GREEDY, "n": 3}).json()
    assert [c["index"] for c in data["choices"]] == [0, 1, 2]
    assert all(c["finish_reason"] == "length" and c["message"]["role"] == "assistant" for c in data["choices"])
    texts = {c["message"]["content"] for c in data["choices"]}
    assert len(texts) == 1  # greedy: the same answer three times
    assert (
        data["usage"]["completion_tokens"] == 48
        and data["usage"]["total_tokens"] == 48 + data["usage"]["prompt_tokens"]
    )


def test_seeded_choices_differ_and_each_is_the_single_answer_of_its_seed(tiny_server: ServerThread) -> None:
    sampled = {"messages": SEED_CHAT["messages"], "temperature": 1.5, "max_tokens": 12, "seed": 40}
    choices = post(tiny_server, "/v1/chat/completions", {**sampled, "n": 3}).json()["choices"]
    texts = [c["message"]["content"] for c in choices]
    assert len(set(texts)) == 3
    singles = [post(tiny_server, "/v1/chat/completions", {**sampled, "seed": 40 + i}).json() for i in range(3)]
    assert texts == [single["choices"][0]["message"]["content"] for single in singles]


def test_n_choices_stream_together_with_their_indexes(tiny_server: ServerThread) -> None:
    sampled = {"messages": SEED_CHAT["messages"], "temperature": 1.5, "max_tokens": 12, "seed": 40, "n": 2}
    whole = post(tiny_server, "/v1/chat/completions", sampled).json()
    body = {**sampled, "stream": True, "stream_options": {"include_usage": True}}
    events = [json.loads(e) for e in sse_events(tiny_server, "/v1/chat/completions", body) if e != "[DONE]"]
    texts = {0: "", 1: ""}
    for event in events[:-1]:
        (choice,) = event["choices"]
        texts[choice["index"]] += choice["delta"].get("content") or ""
    assert [texts[0], texts[1]] == [c["message"]["content"] for c in whole["choices"]]
    finishes = [e["choices"][0]["index"] for e in events[:-1] if e["choices"][0]["finish_reason"]]
    assert sorted(finishes) == [0, 1] and len({e["id"] for e in events}) == 1
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 24


def test_n_beyond_the_slots_is_a_400(tiny_server: ServerThread) -> None:
    too_many = post(tiny_server, "/v1/chat/completions", {**SEED_CHAT, "n": 5})
    assert too_many.status_code == 400 and too_many.json()["error"]["message"] == "n is 5, but the server has 4 slots"


def test_verbose_adds_the_prompt_and_native_result(tiny_server: ServerThread) -> None:
    quiet = post(tiny_server, "/v1/chat/completions", {**SEED_CHAT, **GREEDY}).json()
    assert "__verbose" not in quiet
    data = post(tiny_server, "/v1/chat/completions", {**SEED_CHAT, **GREEDY, "verbose": True}).json()
    verbose = data["__verbose"]
    assert verbose["prompt"].startswith("<|startoftext|><|im_start|>system\nYou are a helpful assistant.<|im_end|>")
    assert verbose["prompt"].endswith("<|im_start|>assistant\n")
    assert verbose["content"] == data["choices"][0]["message"]["content"]
    assert verbose["tokens_predicted"] == 16 and verbose["tokens_evaluated"] == data["usage"]["prompt_tokens"]


def test_a_prefill_is_continued_in_the_prompt(tiny_server: ServerThread) -> None:
    messages = [*SEED_CHAT["messages"], {"role": "assistant", "content": "Machine learning is"}]
    data = post(tiny_server, "/v1/chat/completions", {"messages": messages, **GREEDY, "verbose": True}).json()
    assert data["__verbose"]["prompt"].endswith("<|im_start|>assistant\nMachine learning is")
    prompt = post(tiny_server, "/apply-template", {"messages": messages}).json()["prompt"]
    assert prompt.endswith("What is machine learning?<|im_end|>\n<|im_start|>assistant\nMachine learning is")


def test_continue_final_message_with_add_generation_prompt_is_a_400(tiny_server: ServerThread) -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    response = post(tiny_server, "/v1/chat/completions", {"messages": messages, "continue_final_message": True})
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": 400,
        "message": "Cannot set both add_generation_prompt and continue_final_message to true.",
        "param": "continue_final_message",
        "type": "invalid_request_error",
    }


def test_the_token_count_route_answers_without_the_v1_prefix(tiny_server: ServerThread) -> None:
    counts = [post(tiny_server, path, SEED_CHAT).json() for path in ("/chat/completions/input_tokens",) * 2]
    assert counts[0] == counts[1] == {"object": "response.input_tokens", "input_tokens": 40}


def test_return_progress_reports_each_prefill_chunk(llama_server: ServerThread) -> None:
    body = {**SEED_CHAT, **GREEDY, "max_tokens": 4, "stream": True, "return_progress": True}

    def progress() -> list[dict[str, object]]:
        chunks = [json.loads(e) for e in sse_events(llama_server, "/v1/chat/completions", body)[:-1]]
        reports = [c for c in chunks if "prompt_progress" in c]
        assert all(c["choices"][0]["delta"] == {"role": "assistant", "content": None} for c in reports)
        return [{k: v for k, v in c["prompt_progress"].items() if k != "time_ms"} for c in reports]

    first = progress()
    total = first[0]["total"]
    assert isinstance(total, int) and total > 32
    steps = [*range(0, total, 16), total]
    assert first == [{"total": total, "cache": 0, "processed": n} for n in steps]
    # The same prompt again: all but its last token come from the cache, then one chunk.
    again = progress()
    assert again == [{"total": total, "cache": total - 1, "processed": n} for n in (total - 1, total)]


def test_return_progress_on_the_native_completion_stream(llama_server: ServerThread) -> None:
    """``/completion`` reports the prefill as llama-server's partial chunks: empty content, ``prompt_progress``,
    and with ``timings_per_token`` the prompt timings so far (zero before the first chunk is decoded)."""
    body = {"prompt": "the quick brown fox " * 12, "n_predict": 2, "stream": True, "return_progress": True}
    chunks = [json.loads(e) for e in sse_events(llama_server, "/completion", {**body, "timings_per_token": True})]
    reports = [c for c in chunks if "prompt_progress" in c]
    total, cache = reports[0]["prompt_progress"]["total"], reports[0]["prompt_progress"]["cache"]
    assert total > 32 and cache <= 1  # (the BOS may be cached from the module's earlier requests)
    steps = [*range(cache, total, 16), total]
    assert [r["prompt_progress"]["processed"] for r in reports] == steps
    assert all((r["content"], r["tokens"], r["stop"]) == ("", [], False) for r in reports)
    assert [r["timings"]["prompt_n"] for r in reports] == [n - cache for n in steps]
    assert reports[0]["timings"]["prompt_ms"] == 0.0
    plain = [json.loads(e) for e in sse_events(llama_server, "/completion", {**body, "return_progress": False})]
    assert not any("prompt_progress" in c for c in plain)


def test_n_choices_share_one_prefill(server_factory: Callable[..., ServerThread], tiny_gguf: Path) -> None:
    server = server_factory(Settings.of(model=str(tiny_gguf), ctx_size=4096, parallel=3, threads=2, metrics=True))
    system = " ".join(f"Rule {i}: be brief." for i in range(60))
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}], "n": 3}
    data = post(server, "/v1/chat/completions", {**body, "max_tokens": 4, "seed": 3, "temperature": 1}).json()
    n_prompt = data["usage"]["prompt_tokens"]
    lines = httpx.get(server.url + "/metrics").text.splitlines()
    metrics = {
        line.split(" ")[0]: float(line.split(" ")[1]) for line in lines if line.startswith(("llamacpp:p", "lfm"))
    }
    # The two other choices copy the first one's prefix (a hybrid model redoes the tail after its last checkpoint).
    assert metrics["lfmserve:slot_copies_total"] == 2
    assert metrics["llamacpp:prompt_tokens_total"] < 1.1 * n_prompt
    assert metrics["llamacpp:prompt_tokens_total"] + metrics["llamacpp:prompt_tokens_cached_total"] == 3 * n_prompt
