"""The file tools: ``read_file``, ``write_file``, ``edit_file`` and ``file_glob_search``, with llama-server's
limits, answers and messages (tools/server/server-tools.cpp at the pin)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from .globs import path_matches
from .listing import Kind
from .params import ToolFailed, optional_bool, optional_int, optional_str, required
from .toolio import ToolIO

#: What read_file returns at most as text (more asks for a line range), and as base64.
TEXT_BYTES = 16384
BASE64_BYTES = 32 << 20
#: Results file_glob_search shows at most.
MAX_RESULTS = 100


def read_file(params: Mapping[str, Any], io: ToolIO) -> dict[str, Any]:
    path = required(params, "path", str)
    start = optional_int(params, "start_line", 1)
    end = optional_int(params, "end_line", -1)
    numbered = optional_bool(params, "append_loc", False)
    as_base64 = params.get("resp_type") == "base64"
    size = io.file_size(path)
    if size is None:
        raise ToolFailed(f"cannot stat file: {path}")
    if as_base64:
        if size > BASE64_BYTES:
            raise ToolFailed(f"file too large ({size} bytes, max {BASE64_BYTES})")
        data = _read(io, path)
        return {"base64": base64.b64encode(data).decode(), "size_bytes": len(data)}
    if size > TEXT_BYTES and end == -1:
        raise ToolFailed(f"file too large ({size} bytes, max {TEXT_BYTES}). Use start_line/end_line to read a portion.")
    lines = _read(io, path).split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = bytearray()
    for number, line in enumerate(lines, start=1):
        if number < start:
            continue
        if end != -1 and number > end:
            break
        piece = (f"{number}\u2192".encode() if numbered else b"") + line + b"\n"
        if len(out) + len(piece) > TEXT_BYTES:
            out += b"[output truncated]"
            break
        out += piece
    return {"plain_text_response": out.decode(errors="replace")}


def _read(io: ToolIO, path: str) -> bytes:
    data = io.read(path)
    if data is None:
        raise ToolFailed(f"failed to open file: {path}")
    return data


def write_file(params: Mapping[str, Any], io: ToolIO) -> dict[str, Any]:
    path = required(params, "path", str)
    content = required(params, "content", str).encode()
    _write(io, path, content)
    return {"result": "file written successfully", "path": path, "bytes": len(content)}


def _write(io: ToolIO, path: str, data: bytes) -> None:
    if not io.write(path, data):
        raise ToolFailed(f"failed to write file: {path}")


def edit_file(params: Mapping[str, Any], io: ToolIO) -> dict[str, Any]:
    """Exact replacements, each of a unique text of the file as it was; where one only matches once quotes,
    dashes, odd spaces and trailing blanks are made plain (llama-server's fuzzy match), every edit is matched on
    that plain form, and the lines they touch come out plain."""
    path = required(params, "path", str)
    edits = required(params, "edits", list)
    if not edits:
        raise ToolFailed('"edits" must be a non-empty array')
    pairs = []
    for k, edit in enumerate(edits):
        if not isinstance(edit, dict):
            raise ToolFailed(f"edits[{k}] must be an object")
        old, new = required(edit, "old_text", str), required(edit, "new_text", str)
        if not old:
            raise ToolFailed(f"edits[{k}].old_text must not be empty")
        pairs.append((old, new))
    original = _read(io, path).decode(errors="replace")
    plain_original = _plain(original)
    fuzzy = False
    for k, (old, _) in enumerate(pairs):
        if old not in original:
            if _plain(old) not in plain_original:
                raise ToolFailed(
                    f"could not find edits[{k}].old_text in {path}, it must match the file's current content exactly"
                )
            fuzzy = True
    base = plain_original if fuzzy else original
    located = []
    for k, (old, new) in enumerate(pairs):
        needle = _plain(old) if fuzzy else old
        count = plain_original.count(_plain(old))
        if count > 1:
            raise ToolFailed(f"found {count} occurrences of edits[{k}].old_text in {path}, it must be unique")
        located.append((base.find(needle), k, needle, new))
    located.sort()
    for (start, k, needle, _), (next_start, k_next, _, _) in zip(located, located[1:], strict=False):
        if start + len(needle) > next_start:
            raise ToolFailed(
                f"edits[{k}] and edits[{k_next}] overlap in {path}; merge them into one edit or target disjoint regions"
            )
    if fuzzy:
        result = _untouched_lines_kept(original, base, located)
    else:
        result = original
        for start, _, needle, new in reversed(located):
            result = result[:start] + new + result[start + len(needle) :]
    if result == original:
        raise ToolFailed("no changes made: the replacement(s) produced identical content")
    _write(io, path, result.encode())
    return {"result": "file edited successfully", "path": path, "edits_applied": len(pairs)}


_QUOTES = str.maketrans(
    {
        **{chr(c): "'" for c in range(0x2018, 0x201C)},
        **{chr(c): '"' for c in range(0x201C, 0x2020)},
        **{chr(c): "-" for c in (*range(0x2010, 0x2016), 0x2212)},
        **{chr(c): " " for c in (0x00A0, *range(0x2002, 0x200B), 0x202F, 0x205F, 0x3000)},
    }
)


def _plain(text: str) -> str:
    """llama-server's fuzzy form: trailing blanks of each line dropped, typographic quotes, dashes and spaces
    made plain (the line count kept)."""
    return "\n".join(line.rstrip(" \t\r").translate(_QUOTES) for line in text.split("\n"))


def _untouched_lines_kept(original: str, base: str, located: list[tuple[int, int, str, str]]) -> str:
    """A fuzzy edit's result: the lines no edit touches as they are in the file; each run of lines the edits
    touch (edits on shared lines together) from the plain form, with the replacements made."""
    original_lines = original.split("\n")
    spans, position = [], 0
    for text in base.split("\n"):
        spans.append((position, position + len(text)))  # without the newline
        position += len(text) + 1
    groups: list[tuple[int, int, list[tuple[int, str, str]]]] = []
    for start, _, needle, new in located:  # in the order of their place in the file
        first = next(i for i, (begin, end) in enumerate(spans) if begin <= start <= end)
        stop = next(i for i in range(first, len(spans)) if spans[i][1] >= start + len(needle)) + 1
        if groups and first < groups[-1][1]:
            last_first, last_stop, edits = groups.pop()
            groups.append((last_first, max(last_stop, stop), [*edits, (start, needle, new)]))
        else:
            groups.append((first, stop, [(start, needle, new)]))
    out: list[str] = []
    done = 0  # the lines written so far
    for first, stop, edits in groups:
        out += original_lines[done:first]
        segment_start = spans[first][0]
        segment = base[segment_start : spans[stop - 1][1]]
        for start, needle, new in reversed(edits):
            at = start - segment_start
            segment = segment[:at] + new + segment[at + len(needle) :]
        out.append(segment)
        done = stop
    return "\n".join(out + original_lines[done:])


def file_glob_search(params: Mapping[str, Any], io: ToolIO) -> dict[str, Any]:
    path = required(params, "path", str)
    base = io.resolve(path)
    include = optional_str(params, "include", "**")
    exclude = optional_str(params, "exclude", "")
    kind = optional_str(params, "type", "file")
    max_depth = max(0, optional_int(params, "max_depth", 0))
    limit = optional_int(params, "limit", MAX_RESULTS)
    if limit < 1:
        raise ToolFailed(f"invalid limit: {limit} (expected 1 or more)")
    limit = min(limit, MAX_RESULTS)
    if kind not in ("file", "dir", "all"):
        raise ToolFailed(f'invalid type: {kind} (expected "file", "dir" or "all")')
    listing = io.list_entries(base, max_depth=max_depth, kind=_kind(kind))
    if listing is None:
        raise ToolFailed(f"path does not exist or is not a directory: {path}")
    matches = [
        e for e in listing.entries if path_matches(include, e.path) and not (exclude and path_matches(exclude, e.path))
    ]
    shown = matches[:limit]
    text = "".join(e.path + ("/" if e.is_dir else "") + "\n" for e in shown)
    text += f"\n---\nTotal matches: {len(matches)}\n"
    if len(matches) > len(shown):
        text += (
            f"[{len(shown)} results limit reached ({len(matches)} total matches). "
            "Refine the glob pattern to narrow the search.]\n"
        )
    if listing.truncated:
        text += "[results truncated: time budget or unreadable directory]\n"
    listed = [{"path": e.path, "type": "dir" if e.is_dir else "file"} for e in shown]
    return {"plain_text_response": text, "entries": listed, "base": base}


def _kind(kind: str) -> Kind:
    return "dir" if kind == "dir" else "all" if kind == "all" else "file"
