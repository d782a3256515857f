"""llama.cpp's glob matching (``common.cpp``'s ``glob_match``), byte for byte, as the tools' ``include`` and
``exclude`` patterns use it: ``**`` crosses folders, ``*`` and ``?`` do not, ``[...]`` is a class (``!`` negates).

A pattern without ``/`` matches a path's last part; one with ``/`` matches the whole relative path, with
``**/`` put before it unless it starts with ``**`` or ``/`` (so ``src/*.cpp`` does not match ``src/a.cpp`` at the
top, as in llama-server)."""

from __future__ import annotations

from functools import cache


def path_matches(pattern: str, relative: str) -> bool:
    """Whether ``relative`` (``/``-separated) matches a tool's ``include`` or ``exclude`` pattern."""
    if "/" not in pattern:
        return glob_match(pattern, relative.rpartition("/")[2])
    if pattern == "**" or pattern.startswith(("**/", "/")):
        return glob_match(pattern, relative)
    return glob_match("**/" + pattern, relative)


def glob_match(pattern: str, text: str) -> bool:
    """Whether ``text`` matches ``pattern`` (each position pair tried once: ``**`` backtracks)."""
    p, s = pattern, text

    @cache
    def match(i: int, j: int) -> bool:
        if i == len(p):
            return j == len(s)
        if p[i] == "*" and i + 1 < len(p) and p[i + 1] == "*":
            return match(i + 2, j) or (j < len(s) and match(i, j + 1))
        if p[i] == "*":
            k = j
            while k < len(s) and s[k] != "/":
                if match(i + 1, k):
                    return True
                k += 1
            return match(i + 1, k)
        if p[i] == "?":
            return j < len(s) and s[j] != "/" and match(i + 1, j + 1)
        if p[i] == "[":
            end = i + 1
            if end < len(p) and p[end] in "]-":
                end += 1
            while end < len(p) and p[end] != "]":
                end += 1
            if end < len(p):
                return j < len(s) and _in_class(s[j], p, i + 1, end) and match(end + 1, j + 1)
            return j < len(s) and s[j] == "[" and match(i + 1, j + 1)
        return j < len(s) and p[i] == s[j] and match(i + 1, j + 1)

    return match(0, 0)


def _in_class(c: str, p: str, start: int, end: int) -> bool:
    negated = p[start] == "!"
    start += negated
    if start < end and p[start] in "]-":
        if p[start] == c:
            return not negated
        start += 1
    found = False
    while start < end:
        if start + 2 < end and p[start + 1] == "-" and p[start + 2] != "]":
            if p[start] <= c <= p[start + 2]:
                found = True
                break
            start += 3
        else:
            if p[start] == c:
                found = True
                break
            start += 1
    return found != negated
