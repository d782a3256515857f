"""``python -m lfmserve`` is the ``lfmserve`` command."""

import sys

from .cli import main

sys.exit(main())
