"""The router's models by name: one :class:`~.instance.Instance` for each model of the catalog, found by its name
or an alias, and what a reload of the catalog changes.

A model that vanishes at a reload is marked ``removed`` at once (no name finds it any more) but stays here until
its child has exited, so that no child is ever left running untracked.
"""

from __future__ import annotations

from ..errors import InvalidRequest
from .catalog import ModelSpec
from .instance import Instance


class Registry:
    def __init__(self, catalog: dict[str, ModelSpec]) -> None:
        self.instances = {name: Instance(spec) for name, spec in catalog.items()}
        self._names = _aliases(catalog)

    def find(self, name: str) -> Instance | None:
        """The model called ``name`` (or with that alias)."""
        canonical = self._names.get(name)
        return None if canonical is None else self.instances[canonical]

    def get(self, name: str) -> Instance:
        found = self.find(name)
        if found is None:
            raise InvalidRequest(f"model '{name}' not found")
        return found

    def replace(self, catalog: dict[str, ModelSpec]) -> list[Instance]:
        """Take a new catalog: new models are added, changed ones take their new settings, vanished ones are
        removed. Returns the running models that vanished or changed: the caller stops them."""
        stale = [i for name, i in self.instances.items() if i.running and catalog.get(name) != i.spec]
        for name, instance in list(self.instances.items()):
            if name not in catalog:
                instance.removed = True
                self.forget_if_removed(instance)
        for name, spec in catalog.items():
            if name in self.instances:
                self.instances[name].spec = spec
            else:
                self.instances[name] = Instance(spec)
        self._names = _aliases(catalog)
        return stale

    def forget_if_removed(self, instance: Instance) -> None:
        """Drop a removed model once it has no child."""
        if instance.removed and instance.child is None and self.instances.get(instance.name) is instance:
            del self.instances[instance.name]


def _aliases(catalog: dict[str, ModelSpec]) -> dict[str, str]:
    return {alias: name for name, spec in catalog.items() for alias in spec.names}
