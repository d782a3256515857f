"""The values of llama-server's sampler flags, read as its ``common/arg.cpp`` reads them and written back.

Each reader is an argparse ``type``: it returns what :class:`~lfmserve.settings.sampling.SamplingSettings` keeps
(canonical sampler names, ``(token, bias)`` pairs, a checked JSON schema's text) or raises
``argparse.ArgumentTypeError`` with a message that names the value, which argparse prefixes with the flag
(``argument -l/--logit-bias: invalid input format: '15043'``) and :mod:`.argv` with the variable. Each writer
gives the values :meth:`~lfmserve.settings.Settings.to_argv` writes after the field's flag.

The sampler names and letters are :mod:`lfmserve.sampler_order`'s, the one table requests read too.

Example::

    sampler_names("top_k;temp;Min-P")   # ("top_k", "temperature", "min_p")
    logit_bias("15043-1.5")             # (15043, -1.5)
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..sampler_order import order_from_codes, order_from_names

#: ``TOKEN_ID(+/-)BIAS``, spaces allowed around the sign as ``std::stringstream`` skips them.
_LOGIT_BIAS = re.compile(r"\s*(\d+)\s*([+-])\s*(\S.*)")
#: What ``--dry-sequence-breaker`` takes to mean no breakers at all.
NO_BREAKERS = "none"


def sampler_names(text: str) -> tuple[str, ...]:
    """``--samplers``: names separated by ``;`` in any of llama-server's spellings, as canonical names; an empty part
    is skipped (llama-server drops it), an unknown name is an error."""
    try:
        return order_from_names(filter(None, text.split(";")))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def sampler_codes(text: str) -> tuple[str, ...]:
    """``--sampling-seq``: one letter per sampler (``edskypmxt``), as canonical names."""
    try:
        return order_from_codes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def samplers_argv(order: Sequence[str]) -> list[str]:
    return [";".join(order)]


def finite_float(text: str) -> float:
    """A number that is not infinite nor NaN (``--presence-penalty``, ``--frequency-penalty``)."""
    value = _float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not finite")
    return value


def dry_base(text: str) -> float | None:
    """``--dry-base``: None (not set) below 1.0, which llama-server ignores; see :class:`StoreGiven`."""
    value = _float(text)
    return value if value >= 1.0 else None


def int_at_least(low: int, name: str) -> Callable[[str], int]:
    """A whole number ``low`` or more; below it the error is llama-server's ``invalid <name> = <value>``."""

    def read(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"invalid {name} = {value}")
        return value

    return read


def logit_bias(text: str) -> tuple[int, float]:
    """``-l 15043+1`` / ``-l 15043-1.5``: a token id, a sign and a bias (``-inf`` bans the token)."""
    match = _LOGIT_BIAS.fullmatch(text)
    try:
        if match is None:
            raise ValueError(text)
        bias = float(match[3])
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid input format: {text!r} (expected TOKEN_ID(+/-)BIAS)") from None
    return int(match[1]), -bias if match[2] == "-" else bias


def logit_bias_argv(pairs: Iterable[tuple[int, float]]) -> list[str]:
    return [f"{token}{'-' if bias < 0 else '+'}{abs(bias)!r}" for token, bias in pairs]


def fold_breakers(values: Iterable[str]) -> tuple[str, ...]:
    """The ``--dry-sequence-breaker`` values given, in order, as the breakers they leave: ``none`` drops those
    before it (the first use already replaced the default breakers, as the field then holds only what is given)."""
    out: list[str] = []
    for value in values:
        out = [] if value == NO_BREAKERS else [*out, value]
    return tuple(out)


def breakers_argv(breakers: Sequence[str]) -> list[str]:
    return list(breakers) or [NO_BREAKERS]


def read_text(path: str) -> str:
    """``--grammar-file``: the file's text, read when the flag is."""
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"failed to open file {path!r}: {_reason(exc)}") from None


def json_schema(text: str) -> str:
    """``-j``: the schema's text, once it has parsed as JSON and is an object or true/false."""
    return _schema(text, f"invalid JSON schema {_short(text)}")


def json_schema_file(path: str) -> str:
    """``-jf``: the file's schema (:func:`json_schema`), read when the flag is."""
    return _schema(read_text(path), f"invalid JSON schema in {path!r}")


class StoreGiven(argparse.Action):
    """Stores the value unless its type gave None: a value llama-server ignores leaves the earlier one."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        if values is not None:
            setattr(namespace, self.dest, values)


class OneGrammar(argparse.Action):
    """Stores the value and unsets ``clears``: llama-server keeps one grammar, so the later of ``--grammar`` (or
    its file) and ``--json-schema`` (or its file) wins, the environment's value for the other included."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, clears: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.clears = clears

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, self.clears, None)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None


def _schema(text: str, what: str) -> str:
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{what}: {exc}") from None
    if not isinstance(schema, dict | bool):
        raise argparse.ArgumentTypeError(f"{what}: not an object, true or false")
    return text


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


def _reason(exc: OSError | UnicodeDecodeError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 ({exc.reason})"
    return exc.strerror or str(exc)
