"""The router's fork server: a child forked from it starts with every module a child shares already imported and
frozen for the garbage collector (``lfmserve.router.preload``), with what each child would build first already built,
and without the packages only some children use."""

from __future__ import annotations

import gc
import json
import socket
import sys

from lfmserve.router.spawn import ChildStart, Spawner

# This module is imported again in the child (to find its target): it imports nothing heavy at its top.

#: Modules every child imports, which it finds imported already.
SHARED = ("lfmserve.cli", "lfmserve.api.app", "lfmserve.loading.loader")


def _report(start: ChildStart) -> None:
    """The child's target: what it inherited, over its control socket; ``argv`` names the optional packages."""
    from lfmserve.api.openapi import _BODIES
    from lfmserve.settings.argv import parser

    loaded = {name.split(".")[0] for name in sys.modules}
    report = {
        "frozen": gc.get_freeze_count(),
        "preloaded": [name for name in SHARED if name in sys.modules],
        "optional": sorted(loaded & set(start.argv)),
        "bodies": len(_BODIES),
        "bodies_unbuilt": [name for name, model in _BODIES.items() if not model.__pydantic_complete__],
        "parsers_built": parser.cache_info().currsize,
    }
    start.control.sendall(json.dumps(report).encode())
    start.control.close()


def test_a_child_inherits_the_shared_imports_frozen_the_bodies_and_parser_built_and_no_optional_package() -> None:
    from lfmserve.router.serve import PRELOAD
    from tests.test_imports import OPTIONAL

    ours, theirs = socket.socketpair()
    with ours, socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        spawner = Spawner(_report, PRELOAD, None)
        with theirs:  # the child has its own copy: closed here, the report ends where the child closes it
            process = spawner.start(ChildStart("probe", tuple(sorted(OPTIONAL)), listener, theirs, api_key="-"))
        ours.settimeout(120)
        report = json.loads(ours.makefile("rb").read())
        process.join(30)
    assert process.exitcode == 0
    assert report["frozen"] > 10_000  # the imported modules' objects (tens of thousands)
    assert report["preloaded"] == list(SHARED)
    assert report["optional"] == []
    assert (report["bodies"] > 0, report["bodies_unbuilt"], report["parsers_built"]) == (True, [], 1)
