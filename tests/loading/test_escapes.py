"""llama-server's ``--escape``: the escapes llama.cpp's ``string_process_escapes`` reads, and the ones it leaves."""

from __future__ import annotations

import pytest

from lfmserve.loading.escapes import process_escapes


@pytest.mark.parametrize(
    ("typed", "read"),
    [
        ("\\n", "\n"),
        ("a\\tb\\r", "a\tb\r"),
        ("\\'\\\"", "'\""),
        ("\\\\n", "\\n"),  # an escaped backslash, then a plain n
        ("\\x41\\x4", "A\\x4"),  # two hex digits, or left as typed
        ("\\q", "\\q"),  # an unknown escape stays
        ("end\\", "end\\"),  # a backslash at the end stays
        ("plain", "plain"),
    ],
)
def test_escapes_are_read_as_llama_cpp_reads_them(typed: str, read: str) -> None:
    assert process_escapes(typed) == read
