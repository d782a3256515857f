"""``grep_search``: the lines of a file, or of the files under a folder, that match a pattern, as llama-server
writes them (``path:line`` or ``path:N:line``, context lines with ``-``, ``--`` between blocks), at most 100.
Patterns are Python regular expressions (llama-server's are ECMAScript's: the common syntax is the same)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any

from .globs import path_matches
from .params import ToolFailed, optional_bool, optional_int, optional_str, required
from .toolio import ToolIO

MAX_MATCHES = 100


def grep_search(params: Mapping[str, Any], io: ToolIO) -> dict[str, Any]:
    path = required(params, "path", str)
    pattern = required(params, "pattern", str)
    include = optional_str(params, "include", "**")
    exclude = optional_str(params, "exclude", "")
    numbered = optional_bool(params, "return_line_numbers", False)
    literal = optional_bool(params, "literal", False)
    flags = re.IGNORECASE if optional_bool(params, "ignore_case", False) else 0
    context = max(0, optional_int(params, "context_lines", 0))
    try:
        regex = re.compile(re.escape(pattern) if literal else pattern, flags)
    except re.error as exc:
        raise ToolFailed(f"invalid regex: {exc}") from None
    resolved = io.resolve(path)
    if io.is_file(resolved):
        files = [(resolved, path)]
    elif io.is_directory(resolved):
        listing = io.list_entries(resolved, max_depth=0, kind="file")
        if listing is None:
            raise ToolFailed(f"path does not exist or is not a directory: {path}")
        files = [
            (posixpath.join(resolved, e.path), e.path)
            for e in listing.entries
            if path_matches(include, e.path) and not (exclude and path_matches(exclude, e.path))
        ]
    else:
        raise ToolFailed(f"path does not exist: {path}")
    out: list[str] = []
    total, full = 0, False
    for file, shown in files:
        data = io.read(file)
        if data is None:
            continue
        lines = data.decode(errors="replace").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        for i, line in enumerate(lines):
            if total >= MAX_MATCHES:
                full = True
                break
            if not regex.search(line):
                continue
            for j in range(max(0, i - context), min(len(lines), i + context + 1)):
                mark = ":" if j == i else "-"
                number = f"{j + 1}{mark}" if numbered or context else ""
                out.append(f"{shown}{mark}{number}{lines[j]}\n")
            if context:
                out.append("--\n")
            total += 1
        if full:
            break
    text = "".join(out) + f"\n---\nTotal matches: {total}\n"
    if full:
        text += f"[{MAX_MATCHES} matches limit reached. Narrow the path/pattern/include to see more.]\n"
    return {"plain_text_response": text}
