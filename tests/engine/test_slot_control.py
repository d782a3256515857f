"""A slot as ``/slots`` sees it and its file commands, on fake memory: which slots they refuse, what they
write and read, and what a slot holds after a file that does not restore."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar, cast

import pytest

from lfmserve.engine.generation import Generation
from lfmserve.engine.inbox import Inbox
from lfmserve.engine.memory import SlotMemory
from lfmserve.engine.records import EngineRequest, SlotTask, Timings
from lfmserve.engine.scheduler import Slot
from lfmserve.engine.slot_control import SlotControl
from lfmserve.errors import EngineError, InvalidRequest, Unavailable
from lfmserve.llama.context import NativeContext

T = TypeVar("T")


class _Here:
    """An inbox whose commands run at once, on the caller's thread (the real one is tested in test_inbox)."""

    def call(self, command: Callable[[], T]) -> T:
        return command()


class _Memory:
    def __init__(self, n_slots: int, n_ctx: int) -> None:
        self.slots = tuple(Slot(i, n_ctx=n_ctx) for i in range(n_slots))
        self.resets: list[int] = []

    def reset(self, slot: Slot) -> None:
        self.resets.append(slot.id)
        slot.tokens.clear()
        slot.checkpoints = []


class _Context:
    """Writes the words it is given as text and reads back ``words`` (or fails, as llama.cpp's loader can)."""

    def __init__(self, words: Sequence[int] | None = None) -> None:
        self.model = SimpleNamespace(n_vocab=100)
        self.words = words
        self.saved: list[tuple[int, list[int]]] = []
        self.loaded: list[str] = []

    def save_seq_file(self, seq_id: int, path: str, tokens: Sequence[int]) -> int:
        self.saved.append((seq_id, list(tokens)))
        return Path(path).write_text(" ".join(map(str, tokens)))

    def load_seq_file(self, seq_id: int, path: str, capacity: int) -> tuple[list[int], int]:
        self.loaded.append(path)
        if self.words is None:
            raise EngineError(f"llama_state_seq_load_file failed for {path}")
        return list(self.words), 1234


def _control(
    ctx: _Context | None = None, n_slots: int = 2, n_ctx: int = 8, *, media: bool = False
) -> tuple[SlotControl, _Memory]:
    memory = _Memory(n_slots, n_ctx)
    context, inbox = cast(NativeContext, ctx or _Context()), cast(Inbox, _Here())
    control = SlotControl(context, cast(SlotMemory, memory), inbox, media=media)
    return control, memory


def _seq_file(path: Path, words: Sequence[int], *, magic: int = 0x67677371, version: int = 3) -> str:
    """A file laid out as ``llama_state_seq_save_file`` writes one: magic, version, the words, then the state."""
    path.write_bytes(struct.pack(f"=III{len(words)}i", magic, version, len(words), *words) + b"state")
    return str(path)


def _generation(slot: Slot, **fields: Any) -> Generation:
    request = EngineRequest(prompt_tokens=(1, 2, 3, 4, 5), max_tokens=10)
    return cast(Generation, SimpleNamespace(id=7, request=request, slot=slot, timings=Timings(prompt_n=2), **fields))


def test_a_slot_shows_the_request_it_runs_then_the_one_it_ran_last() -> None:
    control, memory = _control()
    slot = memory.slots[1]
    assert control.task(1) is None and control.request(1) is None  # before its first request
    slot.tokens = [1, 2, 3, 4]
    gen = _generation(slot, done=False, prefilling=True, n_cached=1, n_decoded=0, has_new_line=False)
    control.started(gen)
    assert control.request(1) is gen.request and control.request(0) is None
    assert control.task(1) == SlotTask(7, gen.request, True, 3, 1, 0, False)  # 4 tokens held, 1 of them cached
    gen.prefilling, gen.n_decoded, gen.has_new_line = False, 6, True
    assert control.task(1) == SlotTask(7, gen.request, True, 2, 1, 6, True)  # the prompt's count, once prefilled
    assert control.task(1).n_remain == 4  # type: ignore[union-attr]
    gen.done = True
    assert control.request(1) is None
    assert control.task(1) == SlotTask(7, gen.request)  # llama-server's counters reset once the slot is released
    assert control.tokens(1) == [1, 2, 3, 4] and control.tokens(1) is not slot.tokens


def test_commands_refuse_a_slot_that_does_not_exist_or_is_busy(tmp_path: Path) -> None:
    control, memory = _control()
    for slot_id in (-1, 2):
        with pytest.raises(InvalidRequest, match=rf"^slot {slot_id} does not exist \(there are 2\)$") as missing:
            control.erase(slot_id)
        assert missing.value.param == "id_slot"
    memory.slots[0].busy = True
    for command in (
        lambda: control.erase(0),
        lambda: control.save(0, str(tmp_path / "s.bin")),
        lambda: control.restore(0, str(tmp_path / "s.bin")),
    ):
        with pytest.raises(Unavailable, match="^slot 0 is processing a request$"):
            command()
    assert memory.resets == []


def test_erase_forgets_an_idle_slot_and_counts_what_it_held() -> None:
    control, memory = _control()
    memory.slots[1].tokens = [5, 6, 7]
    assert control.erase(1) == 3
    assert memory.slots[1].tokens == [] and memory.resets == [1]
    assert control.erase(1) == 0


def test_save_writes_the_packed_tokens_beside_then_over_the_path(tmp_path: Path) -> None:
    ctx = _Context()
    control, memory = _control(ctx)
    memory.slots[1].tokens = [5, 6, 7]
    target = tmp_path / "chat.bin"
    target.symlink_to(tmp_path / "elsewhere.bin")
    assert control.save(1, str(target)) == (3, len("-1 1 3 5 6 7 0"))
    assert ctx.saved == [(1, [-1, 1, 3, 5, 6, 7, 0])]
    assert not target.is_symlink() and target.read_text() == "-1 1 3 5 6 7 0"  # the link replaced, not followed
    assert sorted(os.listdir(tmp_path)) == ["chat.bin"]  # no partial file left


def test_save_into_a_directory_is_the_clients_mistake_and_leaves_nothing_behind(tmp_path: Path) -> None:
    control, _ = _control()
    (tmp_path / "folder").mkdir()
    with pytest.raises(InvalidRequest, match="^cannot save slot 0 to folder: it is a directory$") as refused:
        control.save(0, str(tmp_path / "folder"))
    assert refused.value.param == "filename"
    assert os.listdir(tmp_path) == ["folder"]


def test_restore_loads_the_tokens_into_an_emptied_slot(tmp_path: Path) -> None:
    control, memory = _control(_Context([-1, 1, 3, 5, 6, 7, 0]))
    memory.slots[0].tokens = [9, 9]
    (tmp_path / "chat.bin").write_bytes(b"state")
    assert control.restore(0, str(tmp_path / "chat.bin")) == (3, 1234)
    assert memory.slots[0].tokens == [5, 6, 7] and memory.resets == [0]


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (None, r"^chat\.bin is not a saved slot of this model, or it is larger than slot 0$"),
        (list(range(9)), "^Unable to restore slot: Restored prompt does not fit in the slot context$"),
        ([5, 100], "^Unable to restore slot: Invalid tokens in slot save file$"),
    ],
)
def test_a_file_that_does_not_restore_leaves_the_slot_empty(
    tmp_path: Path, words: list[int] | None, message: str
) -> None:
    control, memory = _control(_Context(words))
    memory.slots[0].tokens = [9, 9]
    (tmp_path / "chat.bin").write_bytes(b"state")
    with pytest.raises(InvalidRequest, match=message):
        control.restore(0, str(tmp_path / "chat.bin"))
    assert memory.slots[0].tokens == [] and memory.resets == [0, 0]


def test_restore_reads_only_a_regular_file_in_the_folder(tmp_path: Path) -> None:
    control, memory = _control(_Context([5]))
    (tmp_path / "real.bin").write_bytes(b"state")
    (tmp_path / "link.bin").symlink_to(tmp_path / "real.bin")
    (tmp_path / "folder").mkdir()
    for name in ("link.bin", "folder", "missing.bin"):
        with pytest.raises(InvalidRequest, match=rf"^{name} is not a regular file in the slot folder$") as refused:
            control.restore(1, str(tmp_path / name))
        assert refused.value.param == "filename"
    assert memory.resets == []


MEDIA_WORDS = [-1, 1, 4, 5, -977, -977, 6, 0]  # packed: two positions of one image between two tokens


def test_media_positions_are_refused_without_a_projector_before_llama_cpp_loads_the_file(tmp_path: Path) -> None:
    ctx = _Context(MEDIA_WORDS)
    control, memory = _control(ctx)
    memory.slots[0].tokens = [9, 9]
    for words in (MEDIA_WORDS, [5, -977, 6]):  # llama-server's packed list, and the plain one of older servers
        path = _seq_file(tmp_path / "image.bin", words)
        with pytest.raises(InvalidRequest) as refused:
            control.restore(0, path)
        assert refused.value.message == "Unable to restore slot: Cannot restore media tokens without an mmproj"
        assert refused.value.param == "filename" and refused.value.status_code == 400
    assert ctx.loaded == [] and memory.slots[0].tokens == [] and memory.resets == [0, 0, 0, 0]


def test_media_positions_restore_with_a_projector(tmp_path: Path) -> None:
    ctx = _Context(MEDIA_WORDS)
    control, memory = _control(ctx, media=True)
    assert control.restore(0, _seq_file(tmp_path / "image.bin", MEDIA_WORDS)) == (4, 1234)
    assert memory.slots[0].tokens == [5, -977, -977, 6] and len(ctx.loaded) == 1


@pytest.mark.parametrize(
    "layout",
    [
        {"magic": 0x12345678},
        {"version": 2},
        {"words": [-977] * 13},  # more than the slot's 8 tokens and the 4 packing words
        {"cut": True},
        {"text": True},
    ],
)
def test_a_file_whose_token_list_cannot_be_read_is_left_to_llama_cpp(tmp_path: Path, layout: dict[str, Any]) -> None:
    ctx = _Context([5, 6])  # what the stand-in for llama.cpp reads back from any file
    control, memory = _control(ctx)
    path = tmp_path / "odd.bin"
    words = layout.get("words", [5, -977])
    _seq_file(path, words, magic=layout.get("magic", 0x67677371), version=layout.get("version", 3))
    if layout.get("cut"):
        path.write_bytes(path.read_bytes()[: 12 + 4])  # the count says two words, the file holds one
    if layout.get("text"):
        path.write_bytes(b"-977")
    assert control.restore(0, str(path)) == (2, 1234) and ctx.loaded == [str(path)]
