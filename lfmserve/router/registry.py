"""The router's models by name: one :class:`~.instance.Instance` for each model of the catalog, found by its name
or an alias (a model of Ollama's store also by any name Ollama resolves to it: ``lfm2`` for ``lfm2:latest``), and
what a reload of the catalog changes. A model that cannot be started (:attr:`~.catalog.ModelSpec.problem`) shows
failed with the reason from the start.

A model that vanishes at a reload is marked ``removed`` at once (no name finds it any more, and it leaves the
list); while its child still runs or is being started it is kept apart, ``retiring``, until that child has exited,
so that no child is ever left running untracked. A name added back meanwhile gets a new instance of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidRequest
from .catalog import ModelSpec
from .instance import Instance
from .ollama_store import display_name


class Registry:
    def __init__(self, catalog: dict[str, ModelSpec]) -> None:
        #: The catalog's models, by name: what the model lists show and the names find.
        self.instances = {name: _instance(spec) for name, spec in catalog.items()}
        #: Removed models whose child has not exited yet: they still count against the limits and are stopped at
        #: shutdown.
        self.retiring: list[Instance] = []
        self._names = _aliases(catalog)
        self._store_names = _store_names(catalog)

    def find(self, name: str) -> Instance | None:
        """The model called ``name`` (or with that alias), else the Ollama model that name stands for in Ollama."""
        canonical = self._names.get(name)
        if canonical is None and self._store_names:
            shown = display_name(name)
            canonical = self._store_names.get(shown.casefold()) if shown else None
        return None if canonical is None else self.instances[canonical]

    def get(self, name: str) -> Instance:
        found = self.find(name)
        if found is None:
            raise InvalidRequest(f"model '{name}' not found")
        return found

    def every_instance(self) -> list[Instance]:
        """The catalog's models and the retiring ones: every model that may have a child."""
        return [*self.instances.values(), *self.retiring]

    def replace(self, catalog: dict[str, ModelSpec]) -> Replaced:
        """Take a new catalog: new models are added, changed ones take their new settings, vanished ones are
        removed (those still running retire)."""
        stale = [i for name, i in self.instances.items() if i.running and catalog.get(name) != i.spec]
        removed = [self.instances.pop(name) for name in list(self.instances) if name not in catalog]
        for instance in removed:
            instance.removed = True
            if instance.running:
                self.retiring.append(instance)
        for name, spec in catalog.items():
            known = self.instances.get(name)
            if known is None:
                self.instances[name] = _instance(spec)
                continue
            before, known.spec = known.spec.problem, spec
            if not known.running and (spec.problem or known.error == before):
                known.error, known.exit_code = spec.problem, 1 if spec.problem else None
        self._names = _aliases(catalog)
        self._store_names = _store_names(catalog)
        return Replaced(stale, removed)

    def forget_retired(self, instance: Instance) -> None:
        """A model that stopped running (its child exited, or never started) is kept no longer if it was retiring."""
        if instance in self.retiring:
            self.retiring.remove(instance)


@dataclass(frozen=True, slots=True)
class Replaced:
    """What :meth:`Registry.replace` changed, for the caller to act on."""

    #: The running models that vanished or changed: the caller stops them.
    stale: list[Instance]
    #: The models that vanished: the requests waiting for one of them are told it is gone.
    removed: list[Instance]


def _aliases(catalog: dict[str, ModelSpec]) -> dict[str, str]:
    return {alias: name for name, spec in catalog.items() for alias in spec.names}


def _store_names(catalog: dict[str, ModelSpec]) -> dict[str, str]:
    """Ollama's models by their display name, case folded (Ollama's names match whatever their case)."""
    return {name.casefold(): name for name, spec in catalog.items() if spec.store is not None}


def _instance(spec: ModelSpec) -> Instance:
    """A model's instance: one that cannot be started shows failed, as a load refused at once (exit code 1)."""
    instance = Instance(spec)
    if spec.problem is not None:
        instance.error, instance.exit_code = spec.problem, 1
    return instance
