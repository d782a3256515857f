"""Reranking routes: ``/rerank``, ``/reranking``, ``/v1/rerank``, ``/v1/reranking``, as llama-server serves them.

Jina's form (``query``, ``documents``, ``top_n``) answers ``{"model", "object", "usage", "results"}`` with
``relevance_score``; TEI's (``texts`` instead of ``documents``) answers the bare list with ``score`` (and
``text`` with ``return_text``). Served with ``--rerank`` (embeddings with rank pooling); 501 otherwise.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import Field

from ..chat.rerank import ranked, rerank_request, scores
from ..errors import InvalidRequest, NotSupported
from .body import Body
from .offload import read_body
from .openapi import request_body
from .sse import until_disconnect
from .state import serving

router = APIRouter()


class RerankRequest(Body):
    #: Checked by hand, for llama-server's messages.
    query: Any = None
    documents: Any = None
    #: TEI's name for ``documents``; its presence also picks TEI's answer.
    texts: Any = None
    top_n: int | None = Field(default=None, ge=0)
    return_text: bool = False
    model: str | None = None

    def checked_query(self) -> str:
        if "query" not in self.model_fields_set:
            raise InvalidRequest('"query" must be provided', param="query")
        if not isinstance(self.query, str):
            raise InvalidRequest('"query" must be a string', param="query")
        return self.query

    def checked_documents(self) -> list[str]:
        """``documents``, else ``texts``, as llama-server reads them: a field that is not a string array is
        passed over, and nothing left is an error."""
        strings = (
            v for v in (self.documents, self.texts) if isinstance(v, list) and all(isinstance(i, str) for i in v)
        )
        documents: list[str] = next(strings, [])
        if not documents:
            raise InvalidRequest('"documents" must be a non-empty string array', param="documents")
        return documents

    @property
    def tei(self) -> bool:
        return "texts" in self.model_fields_set


@router.post("/rerank", openapi_extra=request_body(RerankRequest))
@router.post("/reranking", openapi_extra=request_body(RerankRequest))
@router.post("/v1/rerank", openapi_extra=request_body(RerankRequest))
@router.post("/v1/reranking", openapi_extra=request_body(RerankRequest))
async def rerank(request: Request) -> Any:
    served = serving(request)
    if served.embeddings.pooling != "rank":
        raise NotSupported("This server does not support reranking. Start it with `--reranking`")
    body, offload = await read_body(request, RerankRequest)
    query, documents = body.checked_query(), body.checked_documents()
    engine_request = await offload(rerank_request, served.model, query, documents)
    result = await until_disconnect(request, served.embeddings.embed(engine_request))
    top_n = len(documents) if body.top_n is None else body.top_n
    results = ranked(scores(result), documents, tei=body.tei, with_text=body.tei and body.return_text, top_n=top_n)
    if body.tei:
        return results
    usage = {"prompt_tokens": result.n_prompt_tokens, "total_tokens": result.n_prompt_tokens}
    return {"model": body.model or served.model_name, "object": "list", "usage": usage, "results": results}
