"""Embedding routes: OpenAI's ``/v1/embeddings`` and llama-server's native ``/embedding``, ``/embeddings``.

llama-server answers all three from one handler and one body: ``input`` (or ``content``, which makes the
answer native even on ``/v1/embeddings``), in every prompt shape a completion takes plus chat-style
``{"content": [parts]}`` items; ``encoding_format`` float or base64; ``embd_normalize``. lfmserve also honours
OpenAI's ``dimensions`` (cut, then normalised again), which llama-server ignores.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, cast

import numpy as np
from fastapi import APIRouter, Request
from pydantic import Field

from ..chat.embeddings import EmbeddingInput, check_dimensions, shaped
from ..chat.request import ContentPrompt, EmbeddingOptions
from ..errors import InvalidRequest, NotSupported
from .body import Body
from .native.protocol import MultimodalPrompt, WirePrompt
from .offload import read_body
from .openai.protocol import MediaPart, TextPart
from .openapi import request_body
from .sse import until_disconnect
from .state import serving

router = APIRouter()


class ContentInput(Body):
    """An input as chat-style content parts."""

    content: list[Annotated[TextPart | MediaPart, Field(discriminator="type")]]


EmbeddingItem = WirePrompt | ContentInput


class EmbeddingsRequest(Body):
    input: EmbeddingItem | list[EmbeddingItem] | None = None
    #: llama-server's native name for ``input`` (its answer is then native on every route).
    content: EmbeddingItem | list[EmbeddingItem] | None = None
    encoding_format: str = "float"
    embd_normalize: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)  # llama-server's int
    dimensions: int | None = Field(default=None, ge=1)
    model: str | None = None

    def inputs(self) -> list[EmbeddingInput]:
        """The inputs, as llama-server reads them: an array holding a number is one input; any other array is
        an input per item."""
        value = self.input if self.input is not None else self.content
        if value is None:
            raise InvalidRequest('"input" or "content" must be provided', param="input")
        if not isinstance(value, list) or any(isinstance(item, int) for item in value):
            return [_input(cast(EmbeddingItem, value))]
        return [_input(cast(EmbeddingItem, item)) for item in value]

    def options(self) -> EmbeddingOptions:
        if self.encoding_format not in ("float", "base64"):
            raise InvalidRequest(
                "The format to return the embeddings in. Can be either float or base64", param="encoding_format"
            )
        return EmbeddingOptions(normalize=self.embd_normalize, dimensions=self.dimensions)


def _input(item: EmbeddingItem) -> EmbeddingInput:
    if isinstance(item, ContentInput):
        return ContentPrompt(tuple(part.to_part() for part in item.content))
    if isinstance(item, MultimodalPrompt):
        return item.to_prompt()
    return item


@router.post("/v1/embeddings", openapi_extra=request_body(EmbeddingsRequest))
async def openai_embeddings(request: Request) -> Any:
    return await _embeddings(request, openai_shape=True)


@router.post("/embedding", openapi_extra=request_body(EmbeddingsRequest))
@router.post("/embeddings", openapi_extra=request_body(EmbeddingsRequest))
async def native_embeddings(request: Request) -> Any:
    return await _embeddings(request, openai_shape=False)


async def _embeddings(request: Request, *, openai_shape: bool) -> Any:
    served = serving(request)
    pooling = served.embeddings.pooling
    if pooling is None:
        raise NotSupported("This server does not support embeddings. Start it with `--embeddings`")
    body, offload = await read_body(request, EmbeddingsRequest)
    openai_shape = openai_shape and body.input is not None  # "content" is not OpenAI's: a native answer
    if openai_shape and pooling == "none":
        raise InvalidRequest("Pooling type 'none' is not OAI compatible. Please use a different pooling type")
    options = body.options()
    check_dimensions(options, served.embeddings.width)
    inputs = body.inputs()
    media = await served.embeddings.read_media(inputs)
    engine_request = await offload.also_if(any(media))(served.embeddings.request, inputs, options, media)
    result = await until_disconnect(request, served.embeddings.embed(engine_request))
    vectors = shaped(result, options, normalize=engine_request.normalize)
    if not openai_shape:
        return [{"index": i, "embedding": np.atleast_2d(v).tolist()} for i, v in enumerate(vectors)]
    data = [_openai_item(i, v, body.encoding_format == "base64") for i, v in enumerate(vectors)]
    usage = {"prompt_tokens": result.n_prompt_tokens, "total_tokens": result.n_prompt_tokens}
    return {"model": served.model_name, "object": "list", "usage": usage, "data": data}


def _openai_item(index: int, vector: np.ndarray, as_base64: bool) -> dict[str, Any]:
    if as_base64:
        encoded = base64.b64encode(vector.astype("<f4").tobytes()).decode()
        return {"embedding": encoded, "index": index, "object": "embedding", "encoding_format": "base64"}
    return {"embedding": vector.tolist(), "index": index, "object": "embedding"}
