"""The names of a split GGUF's parts: ``NAME-00001-of-00003.gguf``, ``NAME-00002-of-00003.gguf``, ...

A model too large for one file is cut by llama.cpp's ``gguf-split`` into parts named by ``llama_split_path``
(``%s-%05d-of-%05d.gguf``), and llama.cpp loads every part from the first one's name. lfmserve reads those names
where it picks a quant's files on the Hub, lists the models in a folder, checks that a split model has each of
its parts, and maps the weights of every part: all of them read the rule here, so a part is recognised, and its
siblings named, one way.

Example::

    split_part("m/LFM2-Q4_0-00002-of-00003.gguf")  # SplitPart(prefix="m/LFM2-Q4_0", number=2, count=3)
    split_part("m/LFM2-Q4_0.gguf")                 # None: not a part
    split_paths("m/LFM2", 2)                       # ["m/LFM2-00001-of-00002.gguf", "m/LFM2-00002-of-00002.gguf"]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The end of a part's name: its number and the count, five digits each (``-00001-of-00003.gguf``).
_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


@dataclass(frozen=True, slots=True)
class SplitPart:
    """What a part's name says: the name before the part number (the path's, with its folders), which part it is
    (from 1) and how many parts the model has."""

    prefix: str
    number: int
    count: int


def split_part(path: str) -> SplitPart | None:
    """The part that ``path`` (a file name or a path) names; None for a file that is not a split GGUF's part."""
    match = _PART.search(path)
    if match is None:
        return None
    return SplitPart(path[: match.start()], int(match[1]), int(match[2]))


def split_paths(prefix: str, count: int) -> list[str]:
    """The names of each of a split GGUF's ``count`` parts, the first first, as ``llama_split_path`` writes them."""
    return [f"{prefix}-{number:05d}-of-{count:05d}.gguf" for number in range(1, count + 1)]
