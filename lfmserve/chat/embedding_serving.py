"""One loaded model's embedding and reranking logic: inputs (text, tokens, media) in, vectors out.

It shares the model, the projector and the media reader with :class:`~lfmserve.chat.serving.Serving`, which
holds it as ``serving.embeddings``; the engine embeds on its second context between generation steps.

Example::

    media = await embeddings.read_media(inputs)
    request = embeddings.request(inputs, EmbeddingOptions(), media)
    result = await embeddings.embed(request)
"""

from __future__ import annotations

from collections.abc import Sequence

from ..engine.core import Engine
from ..engine.embeddings import EmbeddingRequest, EmbeddingResult
from ..engine.stream import ResultFuture
from ..llama.model import NativeModel
from ..llama.mtmd import Media, Projector
from .embeddings import EmbeddingInput, embedding_request, embedding_sources
from .media import MediaReader
from .request import EmbeddingOptions


class EmbeddingServing:
    """The embedding routes' side of a loaded model (``/v1/embeddings``, ``/embedding``, ``/rerank``)."""

    def __init__(
        self, model: NativeModel, engine: Engine, projector: Projector | None, media: MediaReader, normalize: int
    ) -> None:
        self.model = model
        self.engine = engine
        self.projector = projector
        self.media = media
        #: ``--embd-normalize``: how vectors are normalised unless a request says.
        self.normalize = normalize

    @property
    def pooling(self) -> str | None:
        """The embedding context's pooling (None: the server was not started with ``--embeddings``)."""
        return self.engine.embeddings.context.pooling if self.engine.embeddings is not None else None

    @property
    def width(self) -> int:
        """The width of a pooled embedding (0 without ``--embeddings``)."""
        return self.engine.embeddings.context.width if self.engine.embeddings is not None else 0

    @property
    def max_input_tokens(self) -> int:
        """The most tokens one input may have (a physical batch: 0 without ``--embeddings``)."""
        return self.engine.embeddings.context.n_ubatch if self.engine.embeddings is not None else 0

    async def read_media(self, inputs: Sequence[EmbeddingInput]) -> list[list[Media]]:
        """Each input's media, fetched and decoded ([] for text and token inputs)."""
        sources = embedding_sources(inputs)
        self.media.check_types([source for per_input in sources for source in per_input])
        return [await self.media.read(per_input) if per_input else [] for per_input in sources]

    def request(
        self, inputs: Sequence[EmbeddingInput], options: EmbeddingOptions, media: Sequence[Sequence[Media]] = ()
    ) -> EmbeddingRequest:
        """The engine's request for ``inputs``, each tokenized as llama-server tokenizes it, media included."""
        return embedding_request(self.model, self.projector, inputs, media, options, default_normalize=self.normalize)

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        """Each input's vector (or rows), embedded between generation steps."""
        future: ResultFuture[EmbeddingResult] = ResultFuture()
        self.engine.submit_embeddings(request, future)
        try:
            return await future.result()
        except BaseException:  # the caller gave up (the client has gone): the engine stops embedding it
            self.engine.cancel_embeddings(future)
            raise
