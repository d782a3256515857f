"""The documents against the code: the package map names every subpackage, the HTTP reference names every route,
and every relative link in README.md and docs/ points at a file that exists."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import lfmserve
from lfmserve.api.app import create_app
from lfmserve.settings import Settings
from tests.conftest import route_paths

PACKAGE = Path(lfmserve.__file__).resolve().parent
ROOT = PACKAGE.parent
DOCS = ROOT / "docs"
DOCUMENTS = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
#: A markdown link's target: ``[text](target)`` or ``![alt](target)``, up to a space or the closing parenthesis.
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _subpackages() -> list[str]:
    """Every directory under lfmserve/ that holds an ``__init__.py``, as a path relative to the package."""
    return sorted(path.parent.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*/__init__.py"))


def _relative_links(document: Path) -> Iterator[str]:
    """The targets of the links in ``document`` that name a file in this repository (no scheme, no bare anchor)."""
    text = document.read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        yield target


def test_every_subpackage_is_in_the_package_map() -> None:
    architecture = (DOCS / "architecture.md").read_text(encoding="utf-8")
    missing = [
        f"{name}/" for name in _subpackages() if not re.search(rf"(?<![\w/.]){re.escape(name)}/(?![\w/])", architecture)
    ]
    assert missing == [], "docs/architecture.md's package map lacks these subpackages"


def test_the_scan_finds_the_subpackages_and_routes_it_should() -> None:
    assert {"api", "api/openai", "engine/speculation", "llama"} <= set(_subpackages())
    paths = set(route_paths(create_app(Settings(), lambda: pytest.fail("not loaded")).routes))
    assert {"/v1/chat/completions", "/completion", "/v1/messages", "/metrics"} <= paths


def test_every_route_is_in_the_http_reference() -> None:
    http_api = (DOCS / "http-api.md").read_text(encoding="utf-8")
    paths = sorted(set(route_paths(create_app(Settings(), lambda: pytest.fail("not loaded")).routes)))
    missing = [path for path in paths if not re.search(rf"(?<![\w/]){re.escape(path)}(?![\w/{{}}-])", http_api)]
    assert missing == [], "docs/http-api.md lacks these routes"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_relative_link_points_at_a_file(document: Path) -> None:
    broken = [
        target
        for target in _relative_links(document)
        if not (document.parent / target.split("#", 1)[0]).resolve().exists()
    ]
    assert broken == []
