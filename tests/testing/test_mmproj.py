"""The projector writer: files mtmd loads as LFM2-VL's and LFM2-Audio's encoders, deterministic from a seed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lfmserve.llama.model import NativeModel
from lfmserve.llama.mtmd import Projector
from lfmserve.testing import TinyProjector, write_mmproj_gguf


def test_the_same_seed_writes_the_same_projector(tmp_path: Path) -> None:
    paths = [write_mmproj_gguf(tmp_path / f"{i}.gguf", TinyProjector(seed=seed)) for i, seed in enumerate((3, 3, 4))]
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]
    assert digests[0] == digests[1] != digests[2]


@pytest.mark.parametrize(
    ("kind", "vision", "audio", "sample_rate"),
    [("vision", True, False, -1), ("audio", False, True, 16000), ("both", True, True, 16000)],
)
def test_each_kind_loads_with_its_encoders(
    tmp_path: Path, vl_gguf: Path, kind: str, vision: bool, audio: bool, sample_rate: int
) -> None:
    path = write_mmproj_gguf(tmp_path / f"{kind}.gguf", TinyProjector(kind=kind))  # type: ignore[arg-type]
    model = NativeModel(vl_gguf)
    projector = Projector(str(path), model, n_threads=1)
    try:
        assert (projector.vision, projector.audio, projector.sample_rate) == (vision, audio, sample_rate)
    finally:
        projector.close()
        model.close()
