"""The router's own answers about its models: ``/models`` and ``/v1/models`` entries, ``/props``, and
llama-swap's ``/running``, in the shapes llama-server and llama-swap give them."""

from __future__ import annotations

import os
import sys
import time
from importlib.metadata import version
from typing import Any

from ..settings import RouterSettings
from .child import child_argv
from .instance import LOADED, Instance
from .modalities import input_modalities
from .preset import to_ini

#: Keys of a child's own /v1/models entry that the router's entry does not take (it has its own).
_ROUTER_KEYS = frozenset({"id", "aliases", "tags", "object", "owned_by", "created", "status", "architecture"})
#: Flags a section's INI in ``status.preset`` leaves out, as llama-server does.
_NOT_IN_PRESET = frozenset({"host", "port", "alias", "tags"})


def program() -> list[str]:
    """How this lfmserve was started (``status.args`` begins with it, as llama-server's with its binary)."""
    first = os.path.abspath(sys.argv[0])
    return [sys.executable, "-m", "lfmserve"] if first.endswith(("__main__.py", "pytest")) else [first]


def model_list(instances: list[Instance]) -> dict[str, Any]:
    """``GET /models`` and ``GET /v1/models``: every model, loaded or not, by name (llama-server keeps them in a
    sorted map)."""
    now = int(time.time())
    ordered = sorted((i for i in instances if not i.spec.hidden), key=lambda instance: instance.name)
    return {"object": "list", "data": [model_entry(instance, now) for instance in ordered]}


def model_entry(instance: Instance, created: int) -> dict[str, Any]:
    spec = instance.spec
    port = instance.child.port if instance.child else 0
    argv = instance.child.argv if instance.child else child_argv(spec.settings, spec.name, port)
    status: dict[str, Any] = {"value": instance.status, "args": program() + argv, "preset": preset_text(instance)}
    if instance.failed:
        status |= {"failed": True, "exit_code": instance.exit_code}
    entry: dict[str, Any] = {
        "id": spec.name,
        "aliases": list(spec.aliases),
        "tags": list(spec.tags),
        "object": "model",
        "owned_by": "llamacpp",
        "created": created,
        "status": status,
        "architecture": {"input_modalities": input_modalities(spec.projector), "output_modalities": ["text"]},
        "source": spec.source,
        "can_remove": spec.source == "cache",
    }
    if instance.info is not None and instance.running:
        entry |= {key: value for key, value in instance.info.items() if key not in _ROUTER_KEYS}
    return entry


def preset_text(instance: Instance) -> str:
    """The model's settings as one INI section (``status.preset``), without where its child listens."""
    entries: dict[str, str] = {}
    argv = instance.spec.settings.to_argv()
    index = 0
    while index < len(argv):
        flag, _, value = argv[index].partition("=")
        if not value and index + 1 < len(argv) and not argv[index + 1].startswith("--"):
            value = argv[index + 1]
            index += 1
        entries[flag.lstrip("-")] = value or "true"
        index += 1
    return to_ini(instance.name, {k: v for k, v in entries.items() if k not in _NOT_IN_PRESET})


def router_props(settings: RouterSettings) -> dict[str, Any]:
    """``GET /props`` without a model: the router describes itself (llama-server's fields)."""
    return {
        "role": "router",
        "max_instances": settings.models_max,
        "models_autoload": settings.models_autoload,
        "model_alias": "lfmserve",
        "model_path": "none",
        "default_generation_settings": {"params": {}, "n_ctx": 0},
        "ui_settings": {},
        "build_info": f"b{version('lfmserve')} (lfmserve, llama-cpp-python {version('llama-cpp-python')})",
    }


def running(instances: list[Instance]) -> dict[str, Any]:
    """llama-swap's ``GET /running``: the models with a child, and their state."""
    states = {LOADED: "ready"}
    return {
        "running": [
            {
                "model": instance.name,
                "state": "stopping" if instance.stopping else states.get(instance.status, "starting"),
                "cmd": " ".join(program() + instance.child.argv),
                "proxy": instance.child.url,
                "ttl": int(instance.spec.ttl_s),
                "name": instance.name,
                "description": "",
            }
            for instance in instances
            if instance.child is not None
        ]
    }
