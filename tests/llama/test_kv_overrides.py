"""``--override-kv``: llama.cpp's parsing rule, and the metadata llama.cpp loads in place of the file's."""

from __future__ import annotations

from pathlib import Path

import llama_cpp.llama_cpp as llama
import pytest

from lfmserve.errors import EngineError
from lfmserve.llama.kv_overrides import override_array, parse_override
from lfmserve.llama.model import NativeModel
from lfmserve.testing import BOS_ID


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("llama.context_length=int:4096", ("llama.context_length", "int", 4096)),
        ("a.b=int:12abc", ("a.b", "int", 12)),  # C's atol reads the leading number
        ("rope=float:0.25", ("rope", "float", 0.25)),
        ("add=bool:false", ("add", "bool", False)),
        ("name=str:a=b:c", ("name", "str", "a=b:c")),  # only the first = and : separate
    ],
)
def test_overrides_parse_as_llama_cpp_parses_them(text: str, parsed: tuple[str, str, object]) -> None:
    assert parse_override(text) == parsed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no-equals", "malformed KV override 'no-equals'"),
        ("k" * 128 + "=int:1", "malformed KV override"),
        ("k=blob:1", "invalid type for KV override 'k=blob:1' (int, float, bool or str)"),
        ("k=bool:yes", "invalid boolean value for KV override 'k=bool:yes'"),
        ("k=str:" + "v" * 128, "value cannot exceed 127 chars"),
    ],
)
def test_a_malformed_override_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_override(text)
    assert message in str(info.value)


def test_the_array_holds_each_comma_separated_entry_and_ends_with_an_empty_key() -> None:
    array = override_array(["a=int:-3,b=float:1.5", '"c=str:x,y"'])
    entries = [array[i] for i in range(4)]
    assert [(e.key, e.tag) for e in entries] == [
        (b"a", llama.LLAMA_KV_OVERRIDE_TYPE_INT),
        (b"b", llama.LLAMA_KV_OVERRIDE_TYPE_FLOAT),
        (b"c", llama.LLAMA_KV_OVERRIDE_TYPE_STR),
        (b"", 0),
    ]
    assert (entries[0].value.val_i64, entries[1].value.val_f64, entries[2].value.val_str) == (-3, 1.5, b"x,y")
    assert override_array([]) is None


def test_llama_cpp_loads_the_overridden_metadata(tiny_gguf: Path) -> None:
    plain = NativeModel(tiny_gguf, vocab_only=True)
    without_bos = NativeModel(tiny_gguf, vocab_only=True, kv_overrides=["tokenizer.ggml.add_bos_token=bool:false"])
    try:
        assert plain.tokenize("hi", add_special=True, parse_special=False)[0] == BOS_ID
        assert BOS_ID not in without_bos.tokenize("hi", add_special=True, parse_special=False)
        assert (plain.info.add_bos, without_bos.info.add_bos) == (True, False)
    finally:
        plain.close()
        without_bos.close()
    with pytest.raises(EngineError) as info:
        NativeModel(tiny_gguf, vocab_only=True, kv_overrides=["x=blob:1"])
    assert str(info.value).startswith("--override-kv: invalid type for KV override 'x=blob:1'")
