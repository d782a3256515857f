"""LoRA adapters on the engine: the server's scales, each request's, and which generations share a decode.

llama.cpp sets adapters on the whole context, so one decode runs every token under the same scales. A
request's scales are resolved when it starts (its own ``lora`` list, or the server's scales of the moment,
which ``POST /lora-adapters`` changes) and kept on its slot, where they also key the slot's cache: cells
computed under other scales are never reused (:func:`~lfmserve.engine.scheduler.plan_reuse`). Each step
decodes the generations of one set of scales, taking the sets in turn, as llama-server batches only slots
whose adapters are equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import InvalidRequest
from ..llama.context import NativeContext
from ..llama.lora import LoraAdapter, set_adapters
from ..llama.model import NativeModel
from .generation import Generation

#: The scale of each loaded adapter, in load order (empty without adapters).
Scales = tuple[float, ...]


@dataclass(frozen=True, slots=True)
class AdapterInfo:
    """What ``GET /lora-adapters`` lists of one adapter."""

    id: int
    path: str
    scale: float
    task_name: str
    prompt_prefix: str


class Adapters:
    """The adapters loaded with the model and the scales they run under."""

    def __init__(self, model: NativeModel, files: Sequence[tuple[str, float]]) -> None:
        self._loaded = tuple(LoraAdapter(model, path) for path, _ in files)
        #: The server's scales: requests without a ``lora`` list run under them (replaced whole, so any thread
        #: reads a consistent tuple).
        self.scales: Scales = tuple(scale for _, scale in files)
        self._applied: Scales | None = None
        self._turn = 0

    def __len__(self) -> int:
        return len(self._loaded)

    def infos(self) -> tuple[AdapterInfo, ...]:
        return tuple(
            AdapterInfo(i, a.path, scale, a.task_name, a.prompt_prefix)
            for i, (a, scale) in enumerate(zip(self._loaded, self.scales, strict=True))
        )

    def scales_of(self, lora: Sequence[tuple[int, float]] | None) -> Scales:
        """The scales a ``lora`` list asks for: those listed, 0 for the others (None or empty: the server's)."""
        if not lora:
            return self.scales
        check_lora(lora, len(self._loaded))
        chosen = dict(lora)
        return tuple(float(chosen.get(i, 0.0)) for i in range(len(self._loaded)))

    def set_scales(self, lora: Sequence[tuple[int, float]]) -> None:
        """``POST /lora-adapters``: the listed adapters at their scales, the others at 0."""
        check_lora(lora, len(self._loaded))
        chosen = dict(lora)
        self.scales = tuple(float(chosen.get(i, 0.0)) for i in range(len(self._loaded)))

    def batch(self, ctx: NativeContext, running: list[Generation]) -> list[Generation]:
        """The generations this step decodes: those of one set of scales (each set in turn), set on ``ctx``."""
        if not self._loaded or not running:
            return running
        groups = list(dict.fromkeys(gen.slot.adapters for gen in running))
        self._turn = (self._turn + 1) % len(groups)
        scales = groups[self._turn]
        if scales != self._applied:
            set_adapters(ctx, self._loaded, scales)
            self._applied = scales
        return [gen for gen in running if gen.slot.adapters == scales]


def check_lora(lora: Sequence[tuple[int, float]], n_adapters: int) -> None:
    """A ``lora`` list names loaded adapters, each once, with finite scales."""
    ids = [i for i, _ in lora]
    for i, scale in lora:
        if not 0 <= i < n_adapters:
            raise InvalidRequest(f"invalid LoRA adapter id {i}: {n_adapters} adapters are loaded", param="lora")
        if scale != scale or abs(scale) == float("inf"):
            raise InvalidRequest(f"LoRA adapter {i}'s scale must be a finite number", param="lora")
    if len(set(ids)) != len(ids):
        raise InvalidRequest("each LoRA adapter id may appear once", param="lora")
