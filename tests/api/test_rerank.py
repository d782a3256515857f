"""The reranking routes over HTTP on tiny random rerankers (Qwen3's architecture with a two-label head): the
prompts llama-server builds, each score the rank-pooled output ``/embedding`` gives for the same prompt, the
Jina and TEI shapes, ``top_n``, and llama-server's errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lfmserve.llama.model import NativeModel
from lfmserve.loading.engine_config import engine_config
from lfmserve.settings import Settings
from lfmserve.testing import RERANK_TEMPLATE, tiny_reranker, write_lfm2_gguf
from tests.conftest import Running, ServerThread, needs_llama_server, post, start_llama_server

QUERY = "what is the cat doing"
DOCUMENTS = ["the cat is asleep on the mat", "an empty driveway at night", "a dog", "the weather in Paris"]


@pytest.fixture(scope="module")
def templated_gguf(models_dir: Path) -> Path:
    """A reranker with a ``rerank`` prompt template, as Qwen3-Reranker GGUFs have."""
    return write_lfm2_gguf(models_dir / "tiny-reranker.gguf", tiny_reranker(seed=3))


@pytest.fixture(scope="module")
def fallback_gguf(models_dir: Path) -> Path:
    """A reranker without a template whose vocabulary adds EOS and a separator (llama-server's fallback)."""
    return write_lfm2_gguf(models_dir / "tiny-reranker-fallback.gguf", tiny_reranker(seed=4, template=False))


def _settings(path: Path) -> Settings:
    return Settings.of(model=str(path), alias="ranker", ctx_size=1024, parallel=1, threads=1, reranking=True)


@pytest.fixture(scope="module")
def ranker(server_factory: Callable[..., ServerThread], templated_gguf: Path) -> ServerThread:
    return server_factory(_settings(templated_gguf))


@pytest.fixture(scope="module")
def model(templated_gguf: Path) -> Iterator[NativeModel]:
    m = NativeModel(templated_gguf)
    yield m
    m.close()


def _templated_prompt(model: NativeModel, document: str) -> list[int]:
    text = RERANK_TEMPLATE.replace("{query}", QUERY).replace("{document}", document)
    return model.tokenize(text, add_special=False, parse_special=True)


def _fallback_prompt(model: NativeModel, document: str) -> list[int]:
    """``[BOS] query [EOS] [SEP] document [EOS]`` (the tiny vocabulary's EOS is 7, its separator 2)."""
    query, doc = (model.tokenize(t, add_special=False, parse_special=False) for t in (QUERY, document))
    return [1, *query, 7, 2, *doc, 7]


def _pair_score(server: ServerThread, prompt: list[int]) -> float:
    """The rank-pooled output for one prompt, unnormalised: ``[p(yes), p(no)]``; the score is the first."""
    rows = post(server, "/embedding", {"content": prompt, "embd_normalize": -1}).json()[0]["embedding"]
    assert len(rows) == 1 and len(rows[0]) == 2 and abs(sum(rows[0]) - 1) < 1e-5  # the head's softmax
    return float(rows[0][0])


@pytest.mark.parametrize("kind", ["template", "fallback"])
def test_each_score_is_the_rank_pooled_output_of_the_pairs_prompt(
    kind: str, server_factory: Callable[..., ServerThread], templated_gguf: Path, fallback_gguf: Path
) -> None:
    path = templated_gguf if kind == "template" else fallback_gguf
    server = server_factory(_settings(path))
    vocabulary = NativeModel(path, vocab_only=True)
    try:
        prompts = [(_templated_prompt if kind == "template" else _fallback_prompt)(vocabulary, d) for d in DOCUMENTS]
    finally:
        vocabulary.close()
    reply = post(server, "/v1/rerank", {"query": QUERY, "documents": DOCUMENTS})
    assert reply.status_code == 200
    body = reply.json()
    assert (body["model"], body["object"]) == ("ranker", "list")
    n_tokens = sum(map(len, prompts))
    assert body["usage"] == {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
    results = body["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3] and all(
        set(r) == {"index", "relevance_score"} for r in results
    )
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == 4
    for result in results:  # one pair per decode, as the /embedding request: the same floats
        assert result["relevance_score"] == _pair_score(server, prompts[result["index"]])


def test_tei_form_answers_a_bare_list_with_texts_on_request(ranker: ServerThread) -> None:
    jina = post(ranker, "/rerank", {"query": QUERY, "documents": DOCUMENTS}).json()["results"]
    tei = post(ranker, "/reranking", {"query": QUERY, "texts": DOCUMENTS}).json()
    assert tei == [{"index": r["index"], "score": r["relevance_score"]} for r in jina]
    with_text = post(ranker, "/v1/reranking", {"query": QUERY, "texts": DOCUMENTS, "return_text": True, "top_n": 2})
    assert with_text.json() == [{**item, "text": DOCUMENTS[item["index"]]} for item in tei[:2]]
    # return_text is TEI's: the Jina form never carries the documents back, as in llama-server.
    assert (
        post(ranker, "/rerank", {"query": QUERY, "documents": DOCUMENTS, "return_text": True}).json()["results"] == jina
    )


@pytest.mark.parametrize(("top_n", "expected"), [(None, 4), (2, 2), (4, 4), (99, 4), (0, 0)])
def test_top_n_cuts_the_best_first_list(ranker: ServerThread, top_n: int | None, expected: int) -> None:
    everything = post(ranker, "/rerank", {"query": QUERY, "documents": DOCUMENTS}).json()["results"]
    body: dict[str, Any] = {"query": QUERY, "documents": DOCUMENTS} | ({} if top_n is None else {"top_n": top_n})
    reply = post(ranker, "/rerank", body).json()
    assert reply["results"] == everything[:expected]
    assert reply["usage"]["prompt_tokens"] > 0  # usage counts every pair, whatever is shown


def test_the_model_field_is_echoed_and_chat_still_works(ranker: ServerThread) -> None:
    reply = post(ranker, "/rerank", {"model": "my-ranker", "query": QUERY, "documents": DOCUMENTS[:1]}).json()
    assert reply["model"] == "my-ranker"
    chat = post(ranker, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
    assert chat.status_code == 200 and chat.json()["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        ({"documents": DOCUMENTS}, '"query" must be provided', "query"),
        ({"query": 5, "documents": DOCUMENTS}, '"query" must be a string', "query"),
        ({"query": None, "documents": DOCUMENTS}, '"query" must be a string', "query"),
        ({"query": QUERY, "documents": []}, '"documents" must be a non-empty string array', "documents"),
        ({"query": QUERY, "documents": None}, '"documents" must be a non-empty string array', "documents"),
        ({"query": QUERY, "documents": 123}, '"documents" must be a non-empty string array', "documents"),
        ({"query": QUERY, "documents": [1, 2, 3]}, '"documents" must be a non-empty string array', "documents"),
        ({"query": QUERY}, '"documents" must be a non-empty string array', "documents"),
        (
            {"query": QUERY, "documents": DOCUMENTS, "top_n": -1},
            "Invalid value for 'top_n': Input should be greater than or equal to 0 (got -1)",
            "top_n",
        ),
    ],
)
def test_bad_requests_get_llama_servers_messages(
    ranker: ServerThread, body: dict[str, Any], message: str, param: str
) -> None:
    reply = post(ranker, "/rerank", body)
    assert reply.status_code == 400
    assert (reply.json()["error"]["message"], reply.json()["error"].get("param")) == (message, param)


def test_a_document_longer_than_a_micro_batch_is_a_400_naming_the_sizes(
    server_factory: Callable[..., ServerThread], templated_gguf: Path, model: NativeModel
) -> None:
    settings = Settings.of(
        model=str(templated_gguf), ctx_size=512, parallel=1, threads=1, ubatch_size=128, reranking=True
    )
    small = server_factory(settings)
    long = "x " * 60
    reply = post(small, "/rerank", {"query": QUERY, "documents": ["a dog", long]})
    assert reply.status_code == 400
    assert reply.json()["error"]["message"] == (
        f"input ({len(_templated_prompt(model, long))} tokens) is too large to process. increase the physical batch "
        "size (current batch size: 128)"
    )


def test_a_server_without_reranking_answers_501(tiny_server: ServerThread) -> None:
    for path in ("/rerank", "/reranking", "/v1/rerank", "/v1/reranking"):
        reply = post(tiny_server, path, {"query": QUERY, "documents": DOCUMENTS})
        assert reply.status_code == 501
        assert reply.json()["error"] == {
            "code": 501,
            "message": "This server does not support reranking. Start it with `--reranking`",
            "type": "not_supported_error",
        }


def test_the_flags_turn_on_embeddings_with_rank_pooling() -> None:
    for flag in ("--rerank", "--reranking"):
        config = engine_config(Settings.from_argv(["-m", "m.gguf", flag]))
        assert (config.embeddings, config.pooling) == (True, "rank")
    assert engine_config(Settings.from_argv(["-m", "m.gguf", "--embeddings"])).pooling is None


@pytest.mark.slow
@needs_llama_server
@pytest.mark.parametrize("kind", ["template", "fallback"])
def test_scores_and_usage_equal_llama_servers_side_by_side(
    kind: str,
    server_factory: Callable[..., ServerThread],
    running: list[Running],
    templated_gguf: Path,
    fallback_gguf: Path,
) -> None:
    path = templated_gguf if kind == "template" else fallback_gguf
    ours = server_factory(_settings(path))
    theirs = start_llama_server(running, "-m", str(path), "-c", "1024", "-np", "1", "-t", "1", "--reranking")
    for body in ({"query": QUERY, "documents": DOCUMENTS}, {"query": QUERY, "texts": DOCUMENTS, "top_n": 3}):
        mine, reference = (httpx.post(url + "/rerank", json=body, timeout=60).json() for url in (ours.url, theirs.url))
        if isinstance(reference, dict):
            assert mine["usage"] == reference["usage"]
            mine, reference = mine["results"], reference["results"]
        assert mine == reference  # the same prompts decoded alone: llama-server's scores to the bit
