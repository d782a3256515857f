"""How many models, and how much memory, the running children may take: ``--models-max`` and
``--models-memory-max``, and which model to stop to make room.

Memory is counted as what each running child holds (read from ``/proc``: its anonymous memory and its model files'
resident pages, not the libraries all children share or the repacked weights' file pages it gave back), or its
model's files when those are larger (a child still loading has not touched them all); a model about to load counts
as its files. A model's files are the ones its child loads (:attr:`~.catalog.ModelSpec.memory_files`): its draft
model's among them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterable

from ..settings import RouterSettings
from .catalog import ModelSpec
from .instance import Instance


class Capacity:
    def __init__(self, settings: RouterSettings) -> None:
        self.settings = settings

    def full(self, instances: Iterable[Instance], candidate: Instance | None = None) -> bool:
        """Whether starting ``candidate`` (or any model) now would pass a limit."""
        occupied = [i for i in instances if i.running or i.stopping]
        limit = self.settings.models_max
        if limit and len(occupied) >= limit:
            return True
        budget = self.settings.models_memory_max
        if budget is None or candidate is None:
            return False
        used = sum(max(_held(i), files_size(i.spec)) for i in occupied)
        return used + files_size(candidate.spec) > budget

    def too_big(self, instance: Instance) -> str | None:
        """Why the model can never load within the memory budget, if it cannot."""
        budget = self.settings.models_memory_max
        size = files_size(instance.spec)
        if budget is not None and size > budget:
            return (
                f"model '{instance.name}' needs {size / 2**20:.1f} MiB for its files alone, more than "
                f"--models-memory-max ({budget / 2**20:.1f} MiB)"
            )
        return None

    @staticmethod
    def victim(instances: Iterable[Instance], queued: Collection[Instance]) -> Instance | None:
        """The least recently used idle model no queued load is for."""
        idle = [i for i in instances if i.idle and i not in queued]
        return min(idle, key=lambda i: i.last_used, default=None)


def _held(instance: Instance) -> int:
    memory = instance.child.memory(instance.spec.memory_files) if instance.child else None
    return memory["held"] if memory else 0


def files_size(spec: ModelSpec) -> int:
    """Bytes on disk of the files the model's child loads, its draft model's among them (0 for files not there yet,
    such as a download to come)."""
    total = 0
    for path in spec.memory_files:
        with contextlib.suppress(OSError):
            total += os.path.getsize(path)
    return total
