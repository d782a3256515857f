"""Every llama.cpp handle and call: the only package that imports ``llama_cpp`` (the pinned low-level bindings).

The rest of lfmserve deals in Python ints, bytes, numpy arrays and dataclasses. Return codes become
:class:`~lfmserve.errors.EngineError`; handles are freed before the ones they depend on.

Importing this package makes ``llama_cpp``'s own ``__init__`` wait until something reads a name from it:
lfmserve uses only its submodules (the ctypes bindings ``llama_cpp.llama_cpp`` and ``mtmd_cpp``), and that
``__init__`` imports llama-cpp-python's high-level API (``Llama``, its chat formats, diskcache, sqlite3): 5.5 MB
of memory in every server and router child, and two ``/dev/null`` files opened and never closed. Code in the same
process that does use it (``from llama_cpp import Llama``) gets it as before, loaded at that first read (which
hands llama.cpp's log back to lfmserve, since the high-level API's import takes it).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any


class _PackageRunOnFirstRead(types.ModuleType):
    """``llama_cpp`` whose ``__init__`` runs when a name it defines is first looked up."""

    def __getattr__(self, name: str) -> Any:  # only for names not yet set: submodules are set when imported
        spec = self.__spec__
        if name.startswith("__") or spec is None or spec.loader is None or vars(self).get("_lfmserve_ran"):
            raise AttributeError(name)
        self._lfmserve_ran = True
        spec.loader.exec_module(self)
        from .backend import reclaim_log  # that __init__ hands llama.cpp's log to its own logger

        reclaim_log()
        return getattr(self, name)


def _defer_llama_cpp_init() -> None:
    if "llama_cpp" in sys.modules:
        return
    spec = importlib.util.find_spec("llama_cpp")
    if spec is not None and spec.loader is not None:
        package = importlib.util.module_from_spec(spec)
        package.__class__ = _PackageRunOnFirstRead
        sys.modules["llama_cpp"] = package


_defer_llama_cpp_init()
