"""``python -m lfmserve`` is the ``lfmserve`` command."""

import sys

from .cli import command

sys.exit(command())
