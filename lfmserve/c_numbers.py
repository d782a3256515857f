"""The leading number of a string, read as C reads it: the one rule behind every value llama.cpp parses with
``atoi`` / ``atol`` / ``std::stoi`` / ``strtoull`` (integers) or ``atof`` / ``std::stof`` (decimals).

Those readers skip C's blanks (space, tab, newline, vertical tab, form feed, carriage return), take a sign and
ASCII digits, and ignore the rest (``12abc`` is 12), where Python's ``int`` / ``float`` refuse the rest and accept
more (``1_000``, Unicode digits and blanks). Each flag or field that llama-server reads this way is read here, so
lfmserve accepts and refuses the same values. The integers are unbounded: what an overflow means (``stoull``'s
out_of_range, a bound on CPU indexes) is each caller's.

Example::

    leading_int("  -12abc")    # -12
    leading_float("0.5x")      # 0.5
    atoi("abc"), atof("")      # (0, 0.0): no number is 0, as atoi and atof return
    unsigned_64(-1)            # 18446744073709551615, as strtoull wraps a negative number
"""

from __future__ import annotations

import re

#: C's blanks (``isspace`` in the C locale), a sign, then decimal digits; Python's ``\s`` and ``\d`` take more.
_INT = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
#: The same, then a decimal number: digits with an optional point and fraction, or a point and a fraction, then an
#: optional exponent (strtod's hexadecimal, ``inf`` and ``nan`` forms are not read).
_FLOAT = re.compile(r"[ \t\n\v\f\r]*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")
_U64 = 2**64


def leading_int(text: str) -> int | None:
    """The integer at the start of ``text`` (after blanks), as ``std::stoi`` / ``strtoull`` read it; None where
    there is none (where ``stoi`` throws ``invalid_argument``)."""
    match = _INT.match(text)
    return int(match[1]) if match else None


def leading_float(text: str) -> float | None:
    """The decimal number at the start of ``text`` (after blanks), as ``std::stof`` reads it; None where there is
    none."""
    match = _FLOAT.match(text)
    return float(match[1]) if match else None


def atoi(text: str) -> int:
    """C's ``atoi`` / ``atol``: the leading integer, 0 without one."""
    value = leading_int(text)
    return 0 if value is None else value


def atof(text: str) -> float:
    """C's ``atof``: the leading decimal number, 0.0 without one."""
    value = leading_float(text)
    return 0.0 if value is None else value


def unsigned_64(value: int) -> int:
    """``value`` as ``strtoull`` returns a number it read: a negative one wrapped around modulo 2**64 (``-1`` is
    2**64 - 1), any other as it is."""
    return value % _U64 if value < 0 else value
