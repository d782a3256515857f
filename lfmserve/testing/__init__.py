"""Test models made here, never downloaded: tiny random-weight GGUFs (LFM2 text models, LFM2 projectors, BERT
embedders and rerankers, Gemma 3 with its vision projector) that llama.cpp loads like real checkpoints; and test
media (tinted pictures, tones).

Example::

    from lfmserve.testing import TinyLfm2, write_lfm2_gguf
    path = write_lfm2_gguf(tmp_path / "tiny.gguf", TinyLfm2(seed=1))
"""

from .bert import TinyBert, bge_small_shape, jina_reranker_tiny_shape, write_bert_gguf
from .gemma3 import (
    GEMMA3_CHAT_TEMPLATE,
    GEMMA3_SPECIAL_TOKENS,
    TinyGemma3,
    TinyGemma3Projector,
    write_gemma3_gguf,
    write_gemma3_mmproj_gguf,
)
from .lfm2 import (
    BOS_ID,
    EOS_ID,
    LFM2_CHAT_TEMPLATE,
    LFM2_SPECIAL_TOKENS,
    RERANK_TEMPLATE,
    TinyLfm2,
    lfm2_1_2b_shape,
    lfm2_350m_shape,
    tiny_reranker,
    write_lfm2_gguf,
)
from .media import image_bytes, tinted_pixels, tone_samples, video_bytes, wav_bytes
from .mmproj import TinyProjector, lfm2_vl_450m_projector, write_mmproj_gguf
from .resources import free_port, gemma3_270m_path, llama_server_weight_flags

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "GEMMA3_CHAT_TEMPLATE",
    "GEMMA3_SPECIAL_TOKENS",
    "LFM2_CHAT_TEMPLATE",
    "LFM2_SPECIAL_TOKENS",
    "RERANK_TEMPLATE",
    "TinyBert",
    "TinyGemma3",
    "TinyGemma3Projector",
    "TinyLfm2",
    "TinyProjector",
    "bge_small_shape",
    "free_port",
    "gemma3_270m_path",
    "image_bytes",
    "jina_reranker_tiny_shape",
    "lfm2_1_2b_shape",
    "lfm2_350m_shape",
    "lfm2_vl_450m_projector",
    "llama_server_weight_flags",
    "tinted_pixels",
    "tiny_reranker",
    "tone_samples",
    "video_bytes",
    "wav_bytes",
    "write_bert_gguf",
    "write_gemma3_gguf",
    "write_gemma3_mmproj_gguf",
    "write_lfm2_gguf",
    "write_mmproj_gguf",
]
