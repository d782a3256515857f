"""The package's shape, read from its source with ast: which layer imports which, no import cycles, and no class
or function past the size the project keeps to (docs/architecture.md states the same rules)."""

from __future__ import annotations

import ast
import functools
import graphlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

import lfmserve

ROOT = Path(lfmserve.__file__).parent

#: Each layer (a subpackage, or a top-level module) and the layers it may import. Imports inside functions and
#: under ``TYPE_CHECKING`` count too: a cycle that only type checkers see still ties two modules together.
ALLOWED: dict[str, frozenset[str]] = {
    name: frozenset(allowed.split())
    for name, allowed in {
        "errors": "",
        "results": "errors",
        "sampler_order": "",
        "c_numbers": "",
        "gguf_split": "",
        "tools": "",
        "settings": "sampler_order c_numbers tools errors",
        "llama": "c_numbers gguf_split errors",
        "media": "c_numbers errors",
        "engine": "llama sampler_order errors",
        "chat": "engine llama media errors",
        "loading": "chat engine llama media settings sampler_order gguf_split errors",
        "process_memory": "",
        "api": "chat engine settings process_memory sampler_order c_numbers tools errors",
        "local": "loading chat engine llama settings results sampler_order errors",
        "client": "results errors",
        "tui": "client local loading settings results errors",
        "scaleout": "api loading llama settings errors",
        "router": "api loading settings process_memory gguf_split errors",
        "testing": "llama",
        "log_lines": "settings",
        "cli": "api loading log_lines router scaleout settings tui errors",
        "__main__": "cli",
        "__init__": "client local results settings errors",
    }.items()
}

MAX_CLASS_LINES = 280
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _imports(name: str, path: Path) -> Iterator[str]:
    """The lfmserve modules ``name`` imports (``from .x import y`` names module ``x.y`` when ``y`` is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.split(".")[0] == "lfmserve")
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            if target.split(".")[0] != "lfmserve":
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                yield submodule if submodule in MODULES else target


@functools.cache
def imports() -> dict[str, list[str]]:
    """Each module's imports, parsed when a test first asks: not while every xdist worker collects (a second of
    CPU each)."""
    return {name: sorted(set(_imports(name, path))) for name, path in MODULES.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_layer_has_a_rule() -> None:
    assert {_layer(module) for module in MODULES} == set(ALLOWED)


def test_each_layer_imports_only_the_layers_below_it() -> None:
    upward = [
        f"{module} imports {target}"
        for module, targets in imports().items()
        for target in targets
        if _layer(target) != _layer(module) and _layer(target) not in ALLOWED[_layer(module)]
    ]
    assert upward == []


def test_the_rules_themselves_have_no_cycle() -> None:
    graphlib.TopologicalSorter({layer: set(allowed) for layer, allowed in ALLOWED.items()}).prepare()


def _packages() -> list[str]:
    return [name for name, path in MODULES.items() if path.name == "__init__.py"]


@pytest.mark.parametrize("package", _packages())
def test_no_import_cycle_among_a_packages_members(package: str) -> None:
    """Within each package, its modules and subpackages (each taken whole) import each other without a cycle: this
    covers cycles between two modules and between two packages at every depth."""
    depth = len(package.split("."))

    def member(module: str) -> str | None:
        parts = module.split(".")
        if parts[:depth] != package.split(".") or len(parts) == depth:
            return None
        return parts[depth]

    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in imports().items():
        source = member(module)
        if source is None:
            continue
        graph[source] |= {t for t in map(member, targets) if t is not None and t != source}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as cycle:
        pytest.fail(f"import cycle in {package}: {' -> '.join(cycle.args[1])}")


def _sizes(kind: type[ast.AST]) -> Iterator[tuple[str, int]]:
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, kind):
                assert isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                assert node.end_lineno is not None
                yield f"{name}.{node.name}", node.end_lineno - node.lineno + 1


def test_no_class_is_longer_than_280_lines() -> None:
    assert [(name, n) for name, n in _sizes(ast.ClassDef) if n > MAX_CLASS_LINES] == []


def test_no_function_is_longer_than_60_lines() -> None:
    long = [
        (name, n)
        for kind in (ast.FunctionDef, ast.AsyncFunctionDef)
        for name, n in _sizes(kind)
        if n > MAX_FUNCTION_LINES
    ]
    assert long == []


def test_the_scan_sees_imports_of_every_kind() -> None:
    """The scan itself: relative, absolute, nested and submodule imports are all found."""
    found = imports()
    assert "lfmserve.engine.core" in found["lfmserve.loading.loader"]  # from ..engine.core import Engine
    assert "lfmserve.api.openai_responses.responses" in found["lfmserve.api.openai_responses.router"]  # from . import
    assert "lfmserve.local" in found["lfmserve.tui.main"]  # inside a function
