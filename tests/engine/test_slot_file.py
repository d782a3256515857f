"""Slot files hold llama-server's packed token list: written as it writes it, read back with the plain list of
older servers too, and refused (the slot left empty and usable) when malformed."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lfmserve.engine.core import Engine
from lfmserve.engine.records import EngineConfig, EngineRequest
from lfmserve.engine.slot_file import pack_tokens, unpack_tokens
from lfmserve.errors import InvalidRequest
from lfmserve.llama.model import NativeModel
from tests.engine.conftest import GREEDY, run

#: ``llama_state_seq_save_file``'s header: magic, version, then the count of the token words that follow.
HEADER = 12


def test_packed_tokens_are_llama_servers_words() -> None:
    assert pack_tokens([5, 6, 7]) == [-1, 1, 3, 5, 6, 7, 0]
    assert pack_tokens([]) == [-1, 1, 0, 0]
    assert unpack_tokens([-1, 1, 3, 5, 6, 7, 0]) == [5, 6, 7]
    assert unpack_tokens([5, 6, 7]) == [5, 6, 7]  # a plain list, as older servers wrote
    assert unpack_tokens([]) == []


@pytest.mark.parametrize(
    ("words", "message"),
    [
        ([-1, 2, 1, 5, 0], "Unsupported server tokens state version"),
        ([-1, 1, 3, 5, 0], "Malformed server tokens state"),
        ([-1, 1, 1, 5], "Malformed server tokens state"),
        ([-1, 1, 1, 5, 1, 9], "Malformed server tokens state"),
        ([-1, 1, 1, 5, 1], "Cannot restore media chunks saved by llama-server"),
    ],
)
def test_malformed_packed_tokens_are_the_clients_mistake(words: list[int], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        unpack_tokens(words)


@pytest.fixture(scope="module")
def engine(tiny_llama_gguf: Path) -> Iterator[Engine]:
    model = NativeModel(tiny_llama_gguf)
    e = Engine(model, EngineConfig(n_ctx=1024, n_slots=2, n_batch=256, n_ubatch=256, n_threads=2))
    yield e
    e.close()
    model.close()


def _fill(engine: Engine, slot: int) -> list[int]:
    rng = np.random.default_rng(slot)
    prompt = tuple(int(t) for t in rng.integers(10, engine.model.n_vocab, 30))
    request = EngineRequest(prompt_tokens=prompt, sampling=replace(GREEDY, ignore_eos=True), max_tokens=5, id_slot=slot)
    run(engine, request)
    return engine.slot_tokens(slot)


def test_a_saved_slot_holds_the_packed_list_and_restores_in_another_slot(engine: Engine, tmp_path: Path) -> None:
    held = _fill(engine, 1)
    n_saved, n_written = engine.save_slot(1, str(tmp_path / "s.bin"))
    data = (tmp_path / "s.bin").read_bytes()
    (n_words,) = struct.unpack_from("=I", data, HEADER - 4)
    words = list(struct.unpack_from(f"={n_words}i", data, HEADER))
    assert (n_saved, n_written, len(data), words) == (34, len(data), n_written, [-1, 1, 34, *held, 0])
    assert engine.restore_slot(0, str(tmp_path / "s.bin")) == (34, n_written) and engine.slot_tokens(0) == held
    follow = EngineRequest(prompt_tokens=(*held, 7), sampling=GREEDY, max_tokens=1, id_slot=0)
    assert run(engine, follow)[-1].n_cached_tokens == 34  # the restored memory is reused whole


def test_a_plain_token_list_restores_too(engine: Engine, tmp_path: Path) -> None:
    held = _fill(engine, 1)
    engine.save_slot(1, str(tmp_path / "s.bin"))
    data = bytearray((tmp_path / "s.bin").read_bytes())
    # as test_slot_save.py's legacy case does: the packed list rewritten as the plain one older servers wrote
    tokens_start, payload_end = HEADER + 12, HEADER + 4 * (len(held) + 4)
    data = data[:HEADER] + data[tokens_start : tokens_start + 4 * len(held)] + data[payload_end:]
    struct.pack_into("=I", data, HEADER - 4, len(held))
    (tmp_path / "plain.bin").write_bytes(data)
    assert engine.restore_slot(0, str(tmp_path / "plain.bin"))[0] == len(held) and engine.slot_tokens(0) == held


def test_a_file_that_does_not_restore_leaves_the_slot_empty(engine: Engine, tmp_path: Path) -> None:
    _fill(engine, 1)
    engine.save_slot(1, str(tmp_path / "s.bin"))
    data = bytearray((tmp_path / "s.bin").read_bytes())
    struct.pack_into("=i", data, HEADER + 12, engine.model.n_vocab)  # the first token beyond the vocabulary
    (tmp_path / "bad.bin").write_bytes(data)
    _fill(engine, 0)
    with pytest.raises(InvalidRequest, match="Invalid tokens in slot save file"):
        engine.restore_slot(0, str(tmp_path / "bad.bin"))
    assert engine.slot_tokens(0) == []
    assert len(_fill(engine, 0)) == 34  # and the slot works
