"""How lfmserve's log lines look: llama-server's logging flags (``--log-colors``, ``--log-prefix``,
``--log-timestamps``, ``--log-jsonl``) as :mod:`logging` formatters, which :func:`lfmserve.cli.configure_logging`
installs."""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from .settings import LoggingSettings


#: Each level's name in llama.cpp's JSONL and its color (llama.cpp's, common/log.cpp), for the lowest level it
#: starts at: llama.cpp's info lines (TRACE) are info there too.
_LEVELS = (
    (logging.ERROR, "error", "\033[31m"),
    (logging.WARNING, "warn", "\033[35m"),
    (logging.DEBUG + 1, "info", "\033[32m"),
    (logging.NOTSET, "debug", "\033[33m"),
)
_BLUE, _RESET = "\033[34m", "\033[0m"


def _llama_level(levelno: int) -> tuple[str, str]:
    return next((name, color) for lowest, name, color in _LEVELS if levelno >= lowest)


def colors_on(option: str, stream: TextIO) -> bool:
    """``--log-colors``: ``auto`` is on when the stream is a terminal, unless NO_COLOR is set or TERM is dumb
    (llama.cpp's tty_can_use_colors, which asks the same of stdout and stderr)."""
    if option != "auto":
        return option == "on"
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


class LineFormatter(logging.Formatter):
    """``TIME LEVEL [model] logger: message``, then any traceback: the time left out with ``--no-log-timestamps``,
    everything before the message but the model with ``--no-log-prefix`` (llama-server's router, too, keeps its
    children's tag on every line). With colors the time is blue and the level in llama.cpp's color for it."""

    def __init__(self, options: LoggingSettings, model: str | None, colors: bool) -> None:
        super().__init__()
        self._options, self._tag, self._colors = options, f"[{model}] " if model else "", colors

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        if not self._options.log_prefix:
            return self._tag + message
        level = f"{_llama_level(record.levelno)[1]}{record.levelname}{_RESET}" if self._colors else record.levelname
        line = f"{level} {self._tag}{record.name}: {message}"
        if not self._options.log_timestamps:
            return line
        stamp = self.formatTime(record)
        return f"{_BLUE}{stamp}{_RESET} {line}" if self._colors else f"{stamp} {line}"


class JsonLineFormatter(logging.Formatter):
    """llama-server's ``--log-jsonl`` object (``type`` "log", ``time`` in microseconds, 0 with
    ``--no-log-timestamps``, ``level`` as llama.cpp names it, ``msg``), plus the ``logger`` and, in a router's
    child, the ``model``. llama-server counts the time from its start; here it is Unix time, as the text lines
    show the wall clock."""

    def __init__(self, options: LoggingSettings, model: str | None) -> None:
        super().__init__()
        self._timestamps, self._model = options.log_timestamps, model

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, str | int] = {
            "type": "log",
            "time": round(record.created * 1_000_000) if self._timestamps else 0,
            "level": _llama_level(record.levelno)[0],
            "logger": record.name,
            "msg": super().format(record),
        }
        if self._model:
            entry["model"] = self._model
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
