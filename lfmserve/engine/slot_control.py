"""One slot as ``/slots`` and the in-process chat see it: what it runs or ran last, the tokens it holds, and
the commands on an idle one (erase, save to a file, restore from one).

The reads come from any thread and take what the engine thread last wrote, as ``/slots`` in llama-server
does. The commands change a slot's memory, which only the engine thread may touch, so each one is queued
on the engine's inbox and the caller waits until the engine has run it between two steps. The files are
llama.cpp's sequence files with the slot's tokens packed as llama-server packs them
(:mod:`~lfmserve.engine.slot_file`).

Example::

    control = SlotControl(ctx, memory, inbox, media=projector is not None)
    n_saved, n_written = control.save(0, "/srv/slots/chat.bin")  # any thread
    control.erase(0)
    n_restored, n_read = control.restore(0, "/srv/slots/chat.bin")
"""

from __future__ import annotations

import os
import struct
import tempfile

from ..errors import EngineError, InvalidRequest, Unavailable
from ..llama.context import NativeContext
from .generation import Generation
from .inbox import Inbox
from .memory import SlotMemory
from .records import EngineRequest, SlotTask
from .scheduler import Slot
from .slot_file import PACKED_OVERHEAD, pack_tokens, unpack_tokens

#: The head of llama.cpp's sequence file (``llama_state_seq_save_file``): magic ``ggsq``, version, token count.
_SEQ_FILE_HEAD = struct.Struct("=III")
_SEQ_FILE_MAGIC = 0x67677371
_SEQ_FILE_VERSION = 3


class SlotControl:
    """The slots' reads for ``/slots`` and their file commands, kept apart from the engine's loop.

    The engine tells it which generation each slot starts (:meth:`started`); everything else it asks of
    the slots' memory. ``media`` says whether the engine has a projector: without one, a file that holds
    media positions is refused.
    """

    def __init__(self, ctx: NativeContext, memory: SlotMemory, inbox: Inbox, *, media: bool) -> None:
        self._ctx = ctx
        self._memory = memory
        self._inbox = inbox
        self._media = media
        #: The generation each slot runs, or ran last (``/slots`` shows its settings, as llama-server does).
        self._generations: dict[int, Generation] = {}

    def started(self, gen: Generation) -> None:
        """Record that ``gen`` now runs in its slot (engine thread)."""
        self._generations[gen.slot.id] = gen

    # -- reads (any thread) ------------------------------------------------------------------------
    def request(self, slot_id: int) -> EngineRequest | None:
        """The request slot ``slot_id`` is running, if any."""
        gen = self._generations.get(slot_id)
        return gen.request if gen is not None and not gen.done else None

    def task(self, slot_id: int) -> SlotTask | None:
        """What ``/slots`` shows of the request slot ``slot_id`` runs, or ran last; None before its first."""
        gen = self._generations.get(slot_id)
        if gen is None:
            return None
        if gen.done:
            return SlotTask(gen.id, gen.request)
        n_processed = len(gen.slot.tokens) - gen.n_cached if gen.prefilling else gen.timings.prompt_n
        return SlotTask(gen.id, gen.request, True, n_processed, gen.n_cached, gen.n_decoded, gen.has_new_line)

    def tokens(self, slot_id: int) -> list[int]:
        """A copy of the tokens slot ``slot_id`` holds in memory (its prompt cache)."""
        return list(self._memory.slots[slot_id].tokens)

    # -- commands (any thread; they wait until the engine has run them between steps) ---------------
    def erase(self, slot_id: int) -> int:
        """Forget an idle slot's cache; returns how many tokens it held."""
        return self._inbox.call(lambda: self._erase(slot_id))

    def save(self, slot_id: int, path: str) -> tuple[int, int]:
        """Write an idle slot's sequence to ``path``: (tokens saved, bytes written)."""
        return self._inbox.call(lambda: self._save(slot_id, path))

    def restore(self, slot_id: int, path: str) -> tuple[int, int]:
        """Load a saved sequence into an idle slot: (tokens restored, bytes read)."""
        return self._inbox.call(lambda: self._restore(slot_id, path))

    # -- engine thread ------------------------------------------------------------------------------
    def _idle_slot(self, slot_id: int) -> Slot:
        """The slot numbered ``slot_id``, which must exist and not be running a request."""
        slots = self._memory.slots
        if not 0 <= slot_id < len(slots):
            raise InvalidRequest(f"slot {slot_id} does not exist (there are {len(slots)})", param="id_slot")
        slot = slots[slot_id]
        if slot.busy:
            raise Unavailable(f"slot {slot_id} is processing a request")
        return slot

    def _erase(self, slot_id: int) -> int:
        slot = self._idle_slot(slot_id)
        n = len(slot.tokens)
        self._memory.reset(slot)
        return n

    def _save(self, slot_id: int, path: str) -> tuple[int, int]:
        """llama.cpp writes to a new file beside ``path``, which then replaces it: a symbolic link planted at
        ``path`` is replaced, never followed, so nothing is written outside the folder."""
        slot = self._idle_slot(slot_id)
        name = os.path.basename(path)
        fd, partial = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{name}.", suffix=".part")
        os.close(fd)
        try:
            written = self._ctx.save_seq_file(slot.id, partial, pack_tokens(slot.tokens))
            os.replace(partial, path)
        except IsADirectoryError:
            raise InvalidRequest(f"cannot save slot {slot_id} to {name}: it is a directory", param="filename") from None
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
        return len(slot.tokens), written

    def _restore(self, slot_id: int, path: str) -> tuple[int, int]:
        """A file that does not restore leaves the slot empty (and usable), as llama-server does."""
        slot = self._idle_slot(slot_id)
        name = os.path.basename(path)
        if os.path.islink(path) or not os.path.isfile(path):
            raise InvalidRequest(f"{name} is not a regular file in the slot folder", param="filename")
        self._memory.reset(slot)
        try:
            tokens, n_read = self._load(slot, path)
        except InvalidRequest:
            self._memory.reset(slot)
            raise
        slot.tokens = tokens
        return len(tokens), n_read

    def _load(self, slot: Slot, path: str) -> tuple[list[int], int]:
        """The slot file's state, loaded into the slot's sequence, and its tokens, checked as llama-server does.

        Without a projector, media positions (negative ids) are refused as llama-server refuses them, but from
        the file's token list read beforehand, so that a refused file's state never reaches llama.cpp.
        """
        saved = None if self._media else _saved_words(path, slot.n_ctx + PACKED_OVERHEAD)
        if saved is not None and any(t < 0 for t in unpack_tokens(saved)):
            raise InvalidRequest(
                "Unable to restore slot: Cannot restore media tokens without an mmproj", param="filename"
            )
        try:
            words, n_read = self._ctx.load_seq_file(slot.id, path, slot.n_ctx + PACKED_OVERHEAD)
        except EngineError:
            raise InvalidRequest(
                f"{os.path.basename(path)} is not a saved slot of this model, or it is larger than slot {slot.id}",
                param="filename",
            ) from None
        tokens = unpack_tokens(words)
        if len(tokens) > slot.n_ctx:
            raise InvalidRequest("Unable to restore slot: Restored prompt does not fit in the slot context")
        if any(t >= self._ctx.model.n_vocab for t in tokens):  # negative ids are media positions (``slot_file``)
            raise InvalidRequest("Unable to restore slot: Invalid tokens in slot save file", param="filename")
        return tokens, n_read


def _saved_words(path: str, max_words: int) -> list[int] | None:
    """The token words at the head of a llama.cpp sequence file, read without llama.cpp; None when the file is
    not one (or holds more than ``max_words``), for llama.cpp's own load to refuse."""
    with open(path, "rb") as handle:
        head = handle.read(_SEQ_FILE_HEAD.size)
        if len(head) < _SEQ_FILE_HEAD.size:
            return None
        magic, version, n_words = _SEQ_FILE_HEAD.unpack(head)
        if (magic, version) != (_SEQ_FILE_MAGIC, _SEQ_FILE_VERSION) or n_words > max_words:
            return None
        data = handle.read(4 * n_words)
    return list(struct.unpack(f"={n_words}i", data)) if len(data) == 4 * n_words else None
