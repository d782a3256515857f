"""The names of a split GGUF's parts: recognised from any part's name, and written from the first's."""

from __future__ import annotations

import pytest

from lfmserve.gguf_split import SplitPart, split_part, split_paths


@pytest.mark.parametrize(
    ("path", "part"),
    [
        ("m-00001-of-00003.gguf", SplitPart("m", 1, 3)),
        ("/models/LFM2-Q4_0-00002-of-00002.gguf", SplitPart("/models/LFM2-Q4_0", 2, 2)),
        ("a-00001-of-00002-00002-of-00002.gguf", SplitPart("a-00001-of-00002", 2, 2)),  # only the end counts
        ("m.gguf", None),
        ("m-00001-of-00003.GGUF", None),  # llama.cpp writes the suffix in lower case
        ("m-0001-of-0003.gguf", None),  # five digits each
        ("m-00001-of-00003.gguf.part", None),
    ],
)
def test_a_part_is_recognised_by_the_end_of_its_name(path: str, part: SplitPart | None) -> None:
    assert split_part(path) == part


def test_the_parts_are_named_as_llama_split_path_names_them() -> None:
    assert split_paths("dir/m", 3) == [
        "dir/m-00001-of-00003.gguf",
        "dir/m-00002-of-00003.gguf",
        "dir/m-00003-of-00003.gguf",
    ]
    assert split_paths("m", 0) == []


def test_each_named_part_is_recognised_as_itself() -> None:
    assert [split_part(path) for path in split_paths("m", 2)] == [SplitPart("m", 1, 2), SplitPart("m", 2, 2)]
