"""The embedding context's pieces on a tiny Gemma 3 with its projector: an image's rows decoded as mtmd decodes
them (causal attention off), so the pooled vector is the one llama.cpp's own helper gives."""

from __future__ import annotations

from collections.abc import Iterator

import llama_cpp.llama_cpp as llama
import llama_cpp.mtmd_cpp as mtmd
import numpy as np
import numpy.typing as npt
import pytest

from lfmserve.llama.embedding import EmbeddingContext
from lfmserve.llama.model import NativeModel
from lfmserve.llama.mtmd import Media, Projector, PromptChunk
from lfmserve.testing import TinyGemma3, TinyGemma3Projector, tinted_pixels, write_gemma3_gguf, write_gemma3_mmproj_gguf


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NativeModel, Projector]]:
    folder = tmp_path_factory.mktemp("gemma3")
    model = NativeModel(write_gemma3_gguf(folder / "gemma3.gguf", TinyGemma3(seed=1)))
    path = write_gemma3_mmproj_gguf(folder / "mmproj.gguf", TinyGemma3Projector(seed=1))
    projector = Projector(str(path), model, n_threads=1)
    yield model, projector
    projector.close()
    model.close()


def _mtmd_mean(model: NativeModel, projector: Projector, chunks: list[PromptChunk]) -> npt.NDArray[np.float32]:
    """The mean-pooled vector of llama-server's ``--embedding --pooling mean``: each chunk decoded in turn in a
    fresh embedding context, the image through mtmd's own ``mtmd_helper_eval_chunk_single``."""
    params = llama.llama_context_default_params()
    params.embeddings, params.pooling_type = True, llama.LLAMA_POOLING_TYPE_MEAN
    params.n_ctx = params.n_batch = params.n_ubatch = 512
    params.n_threads = params.n_threads_batch = 1
    ctx = llama.llama_init_from_model(model.handle, params)
    batch = llama.llama_batch_init(512, 0, 1)
    try:
        pos = llama.llama_pos(0)
        for chunk in chunks:
            if chunk.kind != "text":
                image = chunk._handle
                assert mtmd.mtmd_helper_eval_chunk_single(projector.handle, ctx, image, pos, 0, 512, True, pos) == 0
                continue
            batch.n_tokens = chunk.n_tokens
            for i, token in enumerate(chunk.tokens):
                batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos.value + i, 1, 1
                batch.seq_id[i][0] = 0
            assert llama.llama_decode(ctx, batch) == 0
            pos.value += chunk.n_tokens
        assert llama.llama_get_causal_attn(ctx)  # mtmd turned it back on
        return np.ctypeslib.as_array(llama.llama_get_embeddings_seq(ctx, 0), shape=(model.info.n_embd,)).copy()
    finally:
        llama.llama_batch_free(batch)
        llama.llama_free(ctx)


def test_an_image_prompt_embeds_as_mtmd_decodes_it(gemma3: tuple[NativeModel, Projector]) -> None:
    """``What is this: <__media__>\\n``, the prompt of llama-server's multimodal embedding request."""
    model, projector = gemma3
    chunks = projector.tokenize(f"What is this: {projector.marker}\n", [Media.image(tinted_pixels(64, 48, seed=2))])
    assert [(c.kind, c.non_causal) for c in chunks] == [("text", False), ("image", True), ("text", False)]
    pieces = [np.asarray(c.tokens, dtype=np.int32) if c.kind == "text" else projector.encode(c) for c in chunks]
    expected = _mtmd_mean(model, projector, chunks)
    text = tuple(chunks[0].tokens)
    vectors = {}
    for non_causal in (True, False):
        context = EmbeddingContext(
            model, pooling="mean", n_ubatch=512, n_seq_max=1, n_threads=1, non_causal_media=non_causal
        )
        try:
            before = context.embed([text])[0]
            vectors[non_causal] = context.embed_pieces(pieces)
            np.testing.assert_array_equal(context.embed([text])[0], before)  # causal again after the image
        finally:
            context.close()
    np.testing.assert_allclose(vectors[True], expected, rtol=1e-5, atol=1e-6)
    assert np.abs(vectors[False] - expected).max() > 0.1  # rows decoded causally are another vector
