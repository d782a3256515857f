"""The tests' package: imported by pytest before any conftest or test module.

Bytecode is written here even where ``PYTHONDONTWRITEBYTECODE`` asks not to (this project's machines set it):
without it each xdist worker compiled lfmserve and rewrote the tests' asserts from source again (7 of its 13 s of
collection), and so did every server process the tests start, for lfmserve's modules. The files go to the
``__pycache__`` folders git ignores; the processes the tests start inherit the variable and only read them.
"""

import sys

sys.dont_write_bytecode = False
