"""A GGUF loaded in this process: the server's serving logic and engine thread, without HTTP."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, get_args

import numpy as np
import numpy.typing as npt

from ..chat.embeddings import EmbeddingInput
from ..chat.request import ContentPart, ContentPrompt, EmbeddingOptions
from ..chat.serving import Serving
from ..chat.template import ChatFormatter
from ..engine.core import Engine
from ..engine.embeddings import EmbeddingResult
from ..engine.records import Pooling, SamplingParams
from ..engine.stream import SyncResult
from ..errors import InvalidRequest, NotSupported
from ..llama.model import ModelInfo
from ..loading.files import ModelFiles
from ..loading.loader import load_serving
from ..sampler_order import canonical_sampling
from ..settings import Settings, sampling_fields
from .chat import Chat
from .turn import ImageInput, media_items, read_media


class Model:
    """A GGUF loaded in this process, with its own engine thread (one slot per concurrent chat).

    ``mmproj``: a multimodal projector GGUF, for ``images=`` and ``audio=``. ``embeddings``: also load an
    embedding context for :meth:`embed`, pooled as ``pooling`` says (the server's ``--pooling``; None: the
    model's). Other keywords are sampling defaults under the request names (``temperature=0.2``).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        n_ctx: int = 4096,
        n_parallel: int = 1,
        n_threads: int | None = None,
        chat_template_file: str | None = None,
        mmproj: str | Path | None = None,
        embeddings: bool = False,
        pooling: Pooling | None = None,
        **sampling_defaults_: Any,
    ) -> None:
        if pooling is not None and pooling not in get_args(Pooling):
            raise ValueError(f"pooling is one of {', '.join(get_args(Pooling))}, not {pooling!r}")
        settings = Settings.of(
            model=str(path),
            mmproj=str(mmproj) if mmproj is not None else None,
            ctx_size=n_ctx,
            parallel=n_parallel,
            chat_template_file=chat_template_file,
            embeddings=embeddings,
            pooling=pooling,
            **_sampling_defaults(sampling_defaults_),
        )
        settings = settings.replace(threads=n_threads) if n_threads else settings
        self._load(settings, ModelFiles(str(path), settings.source.mmproj))

    @classmethod
    def from_settings(cls, settings: Settings, files: ModelFiles | None = None) -> Model:
        """A model loaded as ``lfmserve`` with these settings would load it: every server flag applies (context,
        batch, KV cache types, templates, reasoning format...). ``files``: already resolved (``-hf``)."""
        model = cls.__new__(cls)
        assert settings.source.model is not None or files is not None, "settings.source.model or files"
        model._load(settings, files or ModelFiles(str(settings.source.model), settings.source.mmproj))
        return model

    def _load(self, settings: Settings, files: ModelFiles) -> None:
        self.settings = settings
        #: The server's serving logic for this model: template, defaults, grammars, media reader, engine.
        self.serving: Serving = load_serving(settings, files)
        self._next_slot = 0

    @property
    def engine(self) -> Engine:
        return self.serving.engine

    @property
    def template(self) -> ChatFormatter:
        return self.serving.template

    @property
    def defaults(self) -> SamplingParams:
        """The sampling a turn gets for what it does not set (the model's GGUF, its family's, then ours)."""
        return self.serving.defaults.params

    @property
    def info(self) -> ModelInfo:
        return self.serving.model.info

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        return self.serving.model.tokenize(text, add_special=add_special, parse_special=parse_special)

    def tokenize_chat(self, text: str) -> list[int]:
        """A rendered chat prompt's tokens, as the engine sees them."""
        return self.serving.model.tokenize_chat(text)

    def chat(self, system: str | None = None, tools: Sequence[Mapping[str, Any]] | None = None) -> Chat:
        """A new conversation in the next slot (round robin over ``n_parallel`` slots); ``tools`` (OpenAI function
        tools) are offered on every turn that does not give its own."""
        slot, self._next_slot = self._next_slot, (self._next_slot + 1) % self.engine.n_slots
        return Chat(self.serving, system, slot, tools=tools)

    def embed(self, texts: Sequence[str] = (), images: Sequence[ImageInput] = ()) -> npt.NDArray[np.float32]:
        """One vector per input, texts first, then images: float32, shape ``(n, n_embd)``, normalised as the server
        normalises by default (Euclidean). A text is tokenized as ``/v1/embeddings`` tokenizes ``input``, an image
        as a ``{"content": [image part]}`` input (it needs ``mmproj``).

        Example::

            vectors = model.embed(texts=["a cat", "a dog"])
            similarity = float(vectors[0] @ vectors[1])
        """
        embeddings = self.serving.embeddings
        if embeddings.pooling is None:
            raise NotSupported("this model was loaded without embeddings: Model(path, embeddings=True)")
        if embeddings.pooling == "none":
            raise InvalidRequest("Pooling type 'none' gives a vector per token, not per input: use another pooling")
        texts = [texts] if isinstance(texts, str) else list(texts)
        media = read_media(self.serving.media, media_items(images, ()))
        inputs: list[EmbeddingInput] = [*texts, *(ContentPrompt((ContentPart("image"),)) for _ in media)]
        request = embeddings.request(inputs, EmbeddingOptions(), [[] for _ in texts] + [[m] for m in media])
        sink: SyncResult[EmbeddingResult] = SyncResult()
        self.engine.submit_embeddings(request, sink)
        try:
            result = sink.result()
        except BaseException:  # interrupted: the engine stops embedding it
            self.engine.cancel_embeddings(sink)
            raise
        return np.stack(result.vectors).astype(np.float32, copy=False)

    def close(self) -> None:
        self.serving.close()

    def __enter__(self) -> Model:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _sampling_defaults(values: dict[str, Any]) -> dict[str, Any]:
    """``Model(temperature=0.2)``: the sampling defaults Settings can hold, under the same names."""
    unknown = set(values) - set(sampling_fields())
    if unknown:
        raise TypeError(f"unknown Model options: {', '.join(sorted(unknown))}")
    return canonical_sampling(values)
