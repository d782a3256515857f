"""What the router's fork server imports before it forks a child; imported there only, for what it does on import.

multiprocessing's fork server imports the modules of its preload list once, when it starts, and each child it forks
shares those pages with it (:mod:`.spawn`). This module is that list's one entry: importing it imports what every
child imports (its entry point, the app, the loader, and what uvicorn and a first request load only once they run),
builds what each child would build first (the request bodies' validators, the flags' parser), then calls
:func:`gc.freeze`. It exists because the freeze has to come after the imports, and a preload list can only name
modules to import, not a call to make after them.

Why freeze: each object the garbage collector tracks carries the collector's bookkeeping in its header, and a
collection of the oldest generation writes that header in every object it walks. A child's first full collection
would so touch nearly every inherited object, and copy-on-write would give the child a private copy of most of the
fork server's pages. Frozen objects sit in a permanent generation that no collection walks, so their pages stay
shared (the use :func:`gc.freeze`'s documentation describes).

What only some children use is left out: llguidance (constrained requests), Pillow, libsndfile and soxr (a
projector), huggingface_hub (``-hf``), httpx (media URLs). A child that needs one imports it itself; one that serves
text never pays for it, and the fork server stays as small as a text child.
"""

from __future__ import annotations

import gc
import importlib

#: Every child imports these: the modules ``cli.serve_child`` runs, and the ones loaded lazily by starting a server
#: and answering a first request (uvicorn's protocol and loop, numpy's ctypes views of llama.cpp's logits, ...).
MODULES = (
    "lfmserve.cli",
    "lfmserve.api.app",
    "lfmserve.loading.loader",
    "lfmserve.router.link",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.lifespan.on",
    "uvicorn.loops.auto",
    "uvicorn.loops.uvloop",
    "fastapi.telemetry._runtime",
    "numpy.ctypeslib",
    "jinja2.debug",
    "encodings.idna",
    "encodings.unicode_escape",
)


def _preload() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # uvloop where it is not installed: the child imports what it uses, as without a preload
            pass
    from lfmserve.api.openapi import build_bodies
    from lfmserve.settings.argv import parser

    # Built once here rather than in each child: the request bodies' validators (a single server builds them on
    # first use) and the command line's parser, which each child's flags go through.
    build_bodies()
    parser()
    gc.freeze()


_preload()
