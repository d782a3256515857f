"""The numpy-backed ``llama_batch``: whole runs of one sequence added by slices, the struct pointing into them."""

from __future__ import annotations

import pytest

from lfmserve.errors import EngineError
from lfmserve.llama.batch import Batch


def test_runs_of_tokens_fill_positions_sequences_and_the_logits_flag() -> None:
    batch = Batch(8)
    assert batch.add([5, 6, 7], 10, 2, True) == 2
    assert batch.add([9], 4, 0, False) == 3
    assert batch.n_tokens == 4 and batch.free == 4
    assert list(batch.token[:4]) == [5, 6, 7, 9]
    assert list(batch.pos[:4]) == [10, 11, 12, 4]
    assert list(batch.seq[:4]) == [2, 2, 2, 0]
    assert list(batch.logits[:4]) == [0, 0, 1, 0]
    assert [batch.struct.seq_id[i][0] for i in range(4)] == [2, 2, 2, 0]  # each token's pointer into ``seq``
    assert [batch.struct.token[i] for i in range(4)] == [5, 6, 7, 9]


def test_clear_starts_over_and_an_overflow_is_an_engine_error() -> None:
    batch = Batch(4)
    batch.add([1, 2, 3], 0, 0, True)
    batch.clear()
    assert batch.n_tokens == 0 and batch.add([4], 0, 1, False) == 0 and list(batch.logits[:1]) == [0]
    with pytest.raises(EngineError, match="batch overflow: 5 > 4"):
        batch.add([1, 2, 3, 4], 1, 0, True)
