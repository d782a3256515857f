"""The router's own answers about its models: ``/models`` and ``/v1/models`` entries, ``/props``, and
llama-swap's ``/running``, in the shapes llama-server and llama-swap give them.

An entry's ``architecture`` and, until its child describes the model, its ``meta`` come from the model's files
(:mod:`~lfmserve.router.modalities`, :mod:`~lfmserve.router.gguf_card`), read on a worker thread: parsing a
header not read before takes the event loop milliseconds, and every request waits behind it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

from ..settings import RouterSettings
from .child import child_argv
from .gguf_card import listed_meta
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


@dataclass(frozen=True, slots=True)
class OnDisk:
    """What a model's files say for its entry: what it takes as input, and its ``meta`` before a child gives one
    (None: its file cannot be read yet)."""

    input_modalities: tuple[str, ...]
    meta: dict[str, int] | None
    #: The running child's memory (``status.memory``), read with the files.
    memory: dict[str, int] | None = None


def _read_files(instance: Instance) -> OnDisk:
    """Reads the model's files and its running child's memory (blocking: call it off the event loop)."""
    spec = instance.spec
    memory = instance.child.memory(spec.memory_files) if instance.child and instance.running else None
    return OnDisk(tuple(input_modalities(spec.projector)), listed_meta(spec), memory)


async def model_list(instances: list[Instance]) -> dict[str, Any]:
    """``GET /models`` and ``GET /v1/models``: every model, loaded or not, by name (llama-server keeps them in a
    sorted map)."""
    now = int(time.time())
    ordered = sorted((i for i in instances if not i.spec.hidden), key=lambda instance: instance.name)
    files = await asyncio.to_thread(lambda: [_read_files(instance) for instance in ordered])
    return {"object": "list", "data": [model_entry(i, now, f) for i, f in zip(ordered, files, strict=True)]}


def model_entry(instance: Instance, created: int, files: OnDisk) -> dict[str, Any]:
    """The model's entry; ``meta`` is its child's while it runs and has described it, else the one its files
    give (llama-server's has none then, and a client such as Frigate sizes its prompts from the whole ``-c``)."""
    spec = instance.spec
    port = instance.child.port if instance.child else 0
    argv = instance.child.argv if instance.child else child_argv(spec.settings, spec.name, port)
    status: dict[str, Any] = {"value": instance.status, "args": program() + argv, "preset": preset_text(instance)}
    if instance.failed:
        status |= {"failed": True, "exit_code": instance.exit_code, "error": instance.error}
    if files.memory is not None:
        status["memory"] = files.memory
    entry: dict[str, Any] = {
        "id": spec.name,
        "aliases": list(spec.aliases),
        "tags": list(spec.tags),
        "object": "model",
        "owned_by": "llamacpp",
        "created": created,
        "status": status,
        "architecture": {"input_modalities": list(files.input_modalities), "output_modalities": ["text"]},
        "source": spec.source,
        "can_remove": spec.source == "cache",
    }
    if files.meta is not None:
        entry["meta"] = dict(files.meta)
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


def router_props(settings: RouterSettings, ui_settings: dict[str, Any]) -> dict[str, Any]:
    """``GET /props`` without a model: the router describes itself (llama-server's fields), with the web UI's
    defaults (``--ui-config``)."""
    return {
        "role": "router",
        "max_instances": settings.models_max,
        "models_autoload": settings.models_autoload,
        "model_alias": "lfmserve",
        "model_path": "none",
        "default_generation_settings": {"params": {}, "n_ctx": 0},
        "ui_settings": ui_settings,
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
