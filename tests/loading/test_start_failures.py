"""A start that fails at any step releases what the steps before it acquired: every llama.cpp model and context,
every projector context, every thread and file descriptor is counted before and after a failure injected at each
step of ``load_serving`` (the model, the template, the projector, and each of the engine's acquisitions)."""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as llama
import llama_cpp.mtmd_cpp as mtmd
import pytest

from lfmserve.engine import core
from lfmserve.llama import mapped_weights
from lfmserve.llama.context import NativeContext
from lfmserve.llama.model import NativeModel
from lfmserve.loading import loader
from lfmserve.loading.files import ModelFiles
from lfmserve.loading.loader import load_serving
from lfmserve.settings import Settings
from lfmserve.testing import TinyLfm2, write_lfm2_gguf


class Injected(RuntimeError):
    """The failure a test puts in a step."""


class NativeCounts:
    """Live llama.cpp models and contexts and mtmd contexts, counted through the bindings' own functions; the
    ``fail`` acquisitions answer NULL, as llama.cpp does when it cannot make one. The context that observes a
    model's graph, for ``-lm auto`` to give back the pages of the weights llama.cpp repacked (on CPUs where it
    repacks, one per model), is an ``observer``: its failure costs memory, not the start."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.live: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self.fail: set[tuple[str, int]] = set()
        self._observing = False
        self._count(monkeypatch, llama, "llama_model_load_from_file", "llama_model_free", "model")
        self._count(monkeypatch, llama, "llama_init_from_model", "llama_free", "context")
        self._count(monkeypatch, mtmd, "mtmd_init_from_file", "mtmd_free", "projector")
        observe = mapped_weights._graph_weights

        def observing(model: Any) -> Any:
            self._observing = True
            try:
                return observe(model)
            finally:
                self._observing = False

        monkeypatch.setattr(mapped_weights, "_graph_weights", observing)

    def _count(self, monkeypatch: pytest.MonkeyPatch, module: Any, make: str, free: str, made_kind: str) -> None:
        made, freed = getattr(module, make), getattr(module, free)

        def counted_make(*args: Any) -> Any:
            kind = "observer" if made_kind == "context" and self._observing else made_kind
            self.calls[kind] += 1
            if (kind, self.calls[kind]) in self.fail:
                return None
            handle = made(*args)
            self.live[kind] += bool(handle)
            return handle

        def counted_free(handle: Any) -> None:
            self.live["observer" if made_kind == "context" and self._observing else made_kind] -= bool(handle)
            freed(handle)

        monkeypatch.setattr(module, make, counted_make)
        monkeypatch.setattr(module, free, counted_free)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _raise(*args: Any, **kwargs: Any) -> Any:
    raise Injected("injected")


#: Each step of a start, and how it is made to fail: (what fails, the n-th call answering NULL) or a patch.
STEPS: dict[str, Callable[[pytest.MonkeyPatch, NativeCounts], None]] = {
    "the model": lambda m, n: n.fail.add(("model", 1)),
    "reading the model after its load": lambda m, n: m.setattr(NativeModel, "_read_info", _raise),
    "the chat template": lambda m, n: m.setattr(loader, "chat_template", _raise),
    "the projector": lambda m, n: n.fail.add(("projector", 1)),
    "the projector's second context": lambda m, n: n.fail.add(("projector", 2)),
    "the context": lambda m, n: n.fail.add(("context", 1)),
    "placing the threads": lambda m, n: m.setattr(core, "_place_threads", _raise),
    "the slots' memory, after the disk cache": lambda m, n: m.setattr(core, "SlotMemory", _raise),
    "the media encoder": lambda m, n: m.setattr(core, "MediaEncoder", _raise),
    "the embedding context": lambda m, n: n.fail.add(("context", 2)),
    "the warm-up": lambda m, n: m.setattr(NativeContext, "warm_up", _raise),
    "speculation's cost meter": lambda m, n: m.setattr(core, "CostMeter", _raise),
    "the draft model": lambda m, n: n.fail.add(("model", 2)),
    "the draft model's context": lambda m, n: n.fail.add(("context", 3)),
    "the speculator": lambda m, n: m.setattr(core, "Speculator", _raise),
    "the serving layer": lambda m, n: m.setattr(loader, "Serving", _raise),
}


@pytest.fixture(scope="module")
def draft_gguf(models_dir: Path) -> Path:
    """A draft for the tiny LFM2-VL: the same vocabulary, other weights."""
    return write_lfm2_gguf(
        models_dir / "tiny-lfm2-vl-draft.gguf", TinyLfm2(seed=5, vision_tokens=True, name="Tiny-LFM2-VL")
    )


@pytest.fixture
def everything(vl_gguf: Path, mmproj_gguf: Path, draft_gguf: Path, tmp_path: Path) -> Iterator[Callable[[], None]]:
    """A start that acquires everything a start can: model, projector with a second context, context, disk cache,
    encoder thread, embedding context, warm-up, speculation with a draft model."""
    settings = Settings.of(
        model=str(vl_gguf),
        mmproj=str(mmproj_gguf),
        ctx_size=1024,
        parallel=2,
        threads=2,
        embeddings=True,
        cache_disk=str(tmp_path / "cache"),
        spec_type="draft-simple",
        spec_draft_model=str(draft_gguf),
        spec_exact=False,
    )
    files = ModelFiles(str(vl_gguf), str(mmproj_gguf), str(draft_gguf))
    yield lambda: load_serving(settings, files).close()


def test_a_whole_start_acquires_each_thing_the_failures_below_cut_short(
    everything: Callable[[], None], monkeypatch: pytest.MonkeyPatch, vl_gguf: Path
) -> None:
    """What the steps are counted against: a start that succeeds makes 2 models, 3 contexts and 2 projector
    contexts (and an observer per model where llama.cpp may repack weights: not with AMX), and frees them all
    when it closes."""
    model = NativeModel(str(vl_gguf), load_mode="mmap")
    repacked = 2 * model.repack  # the model and its draft
    model.close()
    counts = NativeCounts(monkeypatch)
    fds, threads = _open_fds(), threading.active_count()
    everything()
    observers = {"observer": repacked} if repacked else {}
    assert dict(counts.calls) == {"model": 2, "projector": 2, "context": 3, **observers}
    assert set(counts.live.values()) == {0}
    assert (_open_fds(), threading.active_count()) == (fds, threads)


@pytest.mark.parametrize("step", list(STEPS))
def test_a_start_that_fails_releases_what_it_had_acquired(
    everything: Callable[[], None], monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    counts = NativeCounts(monkeypatch)
    STEPS[step](monkeypatch, counts)
    fds, threads = _open_fds(), threading.active_count()
    with pytest.raises(Exception) as failed:
        everything()
    assert failed.type.__name__ in ("Injected", "EngineError"), failed.value
    assert {kind: n for kind, n in counts.live.items() if n} == {}
    assert (_open_fds(), threading.active_count()) == (fds, threads)
