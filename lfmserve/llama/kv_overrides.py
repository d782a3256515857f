"""``--override-kv KEY=TYPE:VALUE``: GGUF metadata replaced while llama.cpp loads the model.

The rule is llama.cpp's ``string_parse_kv_override`` (``common/common.cpp``, which the wheel does not ship): a key
of at most 127 bytes, then ``int:``, ``float:``, ``bool:`` (``true`` or ``false``) or ``str:`` (at most 127 bytes)
and the value. llama.cpp reads the array until an entry with an empty key.
"""

from __future__ import annotations

import csv
import ctypes
from collections.abc import Sequence
from typing import Any

import llama_cpp.llama_cpp as llama

from ..c_numbers import atof, atoi
from ..errors import EngineError

_TAGS = {
    "int": llama.LLAMA_KV_OVERRIDE_TYPE_INT,
    "float": llama.LLAMA_KV_OVERRIDE_TYPE_FLOAT,
    "bool": llama.LLAMA_KV_OVERRIDE_TYPE_BOOL,
    "str": llama.LLAMA_KV_OVERRIDE_TYPE_STR,
}
_MAX_BYTES = 127


def parse_override(text: str) -> tuple[str, str, int | float | bool | str]:
    """``KEY=TYPE:VALUE`` as (key, type, value); a ValueError says what is wrong, as llama.cpp's log does."""
    key, sep, typed = text.partition("=")
    if not sep or len(key.encode()) > _MAX_BYTES:
        raise ValueError(f"malformed KV override '{text}'")
    kind, sep, raw = typed.partition(":")
    if not sep or kind not in _TAGS:
        raise ValueError(f"invalid type for KV override '{text}' (int, float, bool or str)")
    if kind == "int":
        return key, kind, atoi(raw)  # llama.cpp reads it with atol
    if kind == "float":
        return key, kind, atof(raw)
    if kind == "bool":
        if raw not in ("true", "false"):
            raise ValueError(f"invalid boolean value for KV override '{text}'")
        return key, kind, raw == "true"
    if len(raw.encode()) > _MAX_BYTES:
        raise ValueError(f"malformed KV override '{text}', value cannot exceed {_MAX_BYTES} chars")
    return key, kind, raw


def override_array(arguments: Sequence[str]) -> Any:
    """A ``llama_model_kv_override`` array for ``llama_model_params.kv_overrides`` from ``--override-kv``'s
    arguments (each comma-separated, quoted as CSV), ended by an empty key; None when there are none. The caller
    keeps it alive until the model is loaded. A malformed entry is an EngineError naming the flag."""
    overrides = [item for argument in arguments for item in next(csv.reader([argument]), [])]
    if not overrides:
        return None
    try:
        parsed = [parse_override(text) for text in overrides]
    except ValueError as exc:
        raise EngineError(f"--override-kv: {exc}") from None
    array = (llama.llama_model_kv_override * (len(overrides) + 1))()
    for entry, (key, kind, value) in zip(array, parsed, strict=False):
        entry.key = key.encode()
        entry.tag = _TAGS[kind]
        if kind == "int":
            entry.value.val_i64 = int(value)
        elif kind == "float":
            entry.value.val_f64 = float(value)
        elif kind == "bool":
            entry.value.val_bool = bool(value)
        else:
            entry.value.val_str = str(value).encode()
    return ctypes.cast(array, ctypes.POINTER(llama.llama_model_kv_override))
