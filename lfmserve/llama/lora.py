"""LoRA adapters: loaded once beside their model, and set on a context with the scales a batch runs under.

llama.cpp applies adapters to a whole context, not to one sequence: every token of a decode runs under the
same adapters and scales. The engine therefore batches together only generations that asked for the same
scales (:mod:`~lfmserve.engine.adapters`), and sets them here before each decode.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import llama_cpp.llama_cpp as llama

from ..errors import EngineError
from .backend import captured_errors, failure_reason
from .context import NativeContext
from .model import NativeModel, model_file_problem


class LoraAdapter:
    """One adapter GGUF loaded for ``model`` (freed with the model, as llama.cpp owns it from then on)."""

    def __init__(self, model: NativeModel, path: str) -> None:
        problem = model_file_problem(path, "LoRA adapter")
        if problem is not None:
            raise EngineError(problem)
        with captured_errors() as errors:
            self.handle: Any = llama.llama_adapter_lora_init(model.handle, path.encode())
        if not self.handle:
            raise EngineError(f"failed to load LoRA adapter {path}: {failure_reason(errors)}")
        self.path = path
        #: ``adapter.lora.task_name`` and ``adapter.lora.prompt_prefix``, which GET /lora-adapters shows.
        self.task_name = self._meta("adapter.lora.task_name")
        self.prompt_prefix = self._meta("adapter.lora.prompt_prefix")

    def _meta(self, key: str) -> str:
        buf = ctypes.create_string_buffer(1024)
        n = llama.llama_adapter_meta_val_str(self.handle, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else ""


def set_adapters(ctx: NativeContext, adapters: Sequence[LoraAdapter], scales: Sequence[float]) -> None:
    """Run the context's next decodes under ``adapters`` at ``scales`` (a scale of 0 leaves one out)."""
    used = [(a, s) for a, s in zip(adapters, scales, strict=True) if s != 0.0]
    handles = (llama.llama_adapter_lora_p_ctypes * max(1, len(used)))(*(a.handle for a, _ in used))
    values = (ctypes.c_float * max(1, len(used)))(*(s for _, s in used))
    if llama.llama_set_adapters_lora(ctx.handle, handles, len(used), values) != 0:
        raise EngineError("could not set the LoRA adapters on the context")
