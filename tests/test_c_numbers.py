"""A string's leading number as C reads it: blanks, a sign, digits, the rest ignored; no number is 0 or None."""

from __future__ import annotations

import pytest

from lfmserve.c_numbers import atof, atoi, leading_float, leading_int, unsigned_64


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("42", 42),
        ("12abc", 12),
        (" \t\n\v\f\r-7", -7),  # C's six blanks
        ("+3", 3),
        ("007", 7),  # decimal, never octal
        ("1.9", 1),
        ("18446744073709551616", 2**64),  # unbounded: overflow is the caller's
        ("", None),
        ("abc", None),
        ("-", None),
        ("\xa05", None),  # a no-break space is not C's blank
        ("\u0663", None),  # nor an Arabic-Indic three a digit
        ("1_000", 1),
    ],
)
def test_leading_int_reads_what_stoi_and_strtoull_read(text: str, value: int | None) -> None:
    assert leading_int(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0.5x", 0.5),
        ("  -1.25e2rest", -125.0),
        (".5", 0.5),
        ("5.", 5.0),
        ("1e", 1.0),  # an exponent without digits is not read
        ("+2E-1", 0.2),
        ("", None),
        (".", None),
        ("e5", None),
    ],
)
def test_leading_float_reads_what_stof_reads(text: str, value: float | None) -> None:
    assert leading_float(text) == value


def test_atoi_and_atof_read_no_number_as_zero() -> None:
    assert (atoi("12abc"), atoi("abc"), atoi("")) == (12, 0, 0)
    assert (atof("0.25x"), atof("x"), atof("")) == (0.25, 0.0, 0.0)
    assert isinstance(atof("3"), float) and isinstance(atoi("3"), int)


def test_unsigned_64_wraps_negative_numbers_as_strtoull_does() -> None:
    assert [unsigned_64(v) for v in (0, 5, -1, -(2**64 - 1), 2**64 + 1)] == [0, 5, 2**64 - 1, 1, 2**64 + 1]
