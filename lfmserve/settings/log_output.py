"""llama-server's logging flags: verbosity, colors, timestamps, JSON lines, the log file.

One group of :class:`~lfmserve.settings.Settings` (:mod:`.groups` lists them all).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import ClassVar

from .fields import flag, switch


@dataclass(frozen=True, slots=True, kw_only=True)
class LoggingSettings:
    """Where the log goes and what its lines show: llama-server's logging flags, for lfmserve's and llama.cpp's."""

    TITLE: ClassVar[str] = "logging"

    log_disable: bool = switch("--log-disable", help="log nothing", default=False, action="store_true")
    log_file: str | None = field(
        default=None,
        metadata=flag(
            "--log-file",
            help="also write the log to this file, emptied first (a router's children log only to the shared stderr)",
        ),
    )
    log_colors: str = field(
        default="auto",
        metadata=flag(
            "--log-colors",
            help="colored log lines: on, off or auto (on when stderr is a terminal, NO_COLOR is unset and TERM is not "
            "dumb)",
            choices=("on", "off", "auto"),
        ),
    )
    log_verbosity: int = field(
        default=3,
        metadata=flag(
            "-lv",
            "--verbosity",
            "--log-verbosity",
            help="most verbose level logged: 0 critical only, 1 errors, 2 warnings, 3 info, 4 also llama.cpp's own "
            "info lines (TRACE), 5 debug (-v: everything)",
            type=int,
        ),
    )
    log_prefix: bool = switch(
        "--log-prefix",
        help="begin each line with its time, level and logger (--no-log-prefix: the message alone)",
        default=True,
    )
    log_timestamps: bool = switch(
        "--log-timestamps", help="the time in each line's prefix, and in JSONL's time field", default=True
    )
    log_jsonl: bool = switch(
        "--log-jsonl",
        help="log one JSON object per line to stdout (type, time, level, logger, msg), without colors",
        default=False,
    )

    @property
    def level(self) -> int:
        """The :mod:`logging` level ``-lv`` stands for. llama.cpp's scale has six steps and Python's five, so its
        trace step (4) is the level, between DEBUG and INFO, that :mod:`lfmserve.llama` gives llama.cpp's own
        info lines, as llama-server shows them only from 4 on."""
        return _LOG_LEVELS[min(max(self.log_verbosity, 0), len(_LOG_LEVELS) - 1)]


#: ``-lv`` 0 to 5 as :mod:`logging` levels (below 0 as 0, above 5 as 5).
_LOG_LEVELS = (logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO, logging.INFO - 5, logging.DEBUG)
