"""The package's public names, and what importing it (or its model-free modules) loads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import lfmserve

PUBLIC = {
    "AsyncClient": "lfmserve.client.client",
    "AuthenticationFailed": "lfmserve.errors",
    "Chat": "lfmserve.local.chat",
    "ChatResult": "lfmserve.results",
    "Client": "lfmserve.client.client",
    "ContextLengthExceeded": "lfmserve.errors",
    "EngineError": "lfmserve.errors",
    "InvalidRequest": "lfmserve.errors",
    "LfmError": "lfmserve.errors",
    "Model": "lfmserve.local.model",
    "NotFound": "lfmserve.errors",
    "NotSupported": "lfmserve.errors",
    "RequestCancelled": "lfmserve.errors",
    "Settings": "lfmserve.settings",
    "TemplateError": "lfmserve.errors",
    "ToolCall": "lfmserve.results",
    "TransportError": "lfmserve.errors",
    "TurnStats": "lfmserve.local.turn",
    "Unavailable": "lfmserve.errors",
}

#: Modules that need no model: a client library (and anything else that only speaks the API) imports them.
MODEL_FREE = (
    "lfmserve",
    "lfmserve.errors",
    "lfmserve.results",
    "lfmserve.client",
    "lfmserve.settings",
    "lfmserve.api.body",
    "lfmserve.api.openai.protocol",
    "lfmserve.api.native.protocol",
    "lfmserve.chat.request",
    "lfmserve.chat.template",
    "lfmserve.chat.tool_calls",
    "lfmserve.chat.output",
    "lfmserve.testing",
)

#: What a model-free import must not pull in: llama.cpp itself, and the HTTP server stack.
HEAVY = ("llama_cpp", "fastapi", "uvicorn")


def test_all_lists_exactly_the_public_names_each_from_its_module() -> None:
    assert lfmserve.__all__ == sorted(PUBLIC)
    for name, module in PUBLIC.items():
        assert getattr(lfmserve, name).__module__ == module
    assert set(PUBLIC) <= set(dir(lfmserve))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        _ = lfmserve.Nope  # type: ignore[attr-defined]


def _loaded_after(statement: str) -> list[str]:
    """The heavy modules a fresh interpreter has loaded after ``statement``."""
    probe = f"import json, sys; {statement}; print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    loaded: list[str] = json.loads(result.stdout)
    return loaded


def test_model_free_modules_import_without_llama_cpp() -> None:
    assert _loaded_after("; ".join(f"import {m}" for m in MODEL_FREE)) == []


def test_the_in_process_api_loads_llama_cpp_on_first_use() -> None:
    assert _loaded_after("import lfmserve") == []
    assert _loaded_after("import lfmserve; lfmserve.Model") == ["llama_cpp"]  # and not the HTTP stack
