"""llama.cpp's own quantizer, for the benchmark model the test-model writer makes in F16."""

from __future__ import annotations

from pathlib import Path

import llama_cpp.llama_cpp as llama


def quantize_q4_k_m(source: str | Path, target: str | Path, n_threads: int = 0) -> Path:
    """Quantize an F16/F32 GGUF to Q4_K_M."""
    params = llama.llama_model_quantize_default_params()
    params.ftype = llama.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.nthread = n_threads
    rc = llama.llama_model_quantize(str(source).encode(), str(target).encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize failed with code {rc}")
    return Path(target)
