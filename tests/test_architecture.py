"""The architecture as a test: the import graph of the project's packages and their size.

Every module under ``bidder/``, ``fcap/``, ``pacing/``, ``ids/`` and ``models/`` is
parsed with ``ast``; every import counts, at module level, inside a function or under
``TYPE_CHECKING``, because each one is a dependency a reader has to follow. The graph
must have no cycle, may point only down (or sideways) the layer table below, and may not
reach into another package's ``_private`` module or take its ``_private`` names. Modules
(also ``scripts/``) stay under ``MAX_MODULE_LINES`` and functions under
``MAX_FUNCTION_LINES``.

``LAYERS`` is the one statement of the layer order, low to high; docs/architecture.md
describes the same table.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bidder", "fcap", "pacing", "ids", "models")
SIZED_DIRS = (*PACKAGES, "scripts")

# Low to high. A module may import modules of its own layer or of a lower one.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("bidder.core",),
    ("bidder.openrtb", "bidder.adapters"),
    ("bidder.stack", "bidder.supply", "bidder.decide"),
    ("bidder.bidstream",),
    ("fcap", "pacing", "ids", "models"),
    ("bidder.winloop",),
    ("bidder.pipeline",),
    ("bidder.serve",),
    ("bidder.replay",),
    ("bidder.chaos",),
    ("bidder.cli", "bidder.__main__"),
)
# A package that only holds layers; its own (empty) __init__ sits below all of them.
CONTAINERS = frozenset({"bidder"})

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


@dataclass(frozen=True)
class Import:
    """One import of a project module: who, where, and which module it names."""

    importer: str
    line: int
    target: str

    def where(self) -> str:
        return f"{module_path(self.importer)}:{self.line}"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every project module by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def module_path(name: str) -> str:
    return str(modules()[name].relative_to(ROOT))


def is_package(name: str) -> bool:
    return modules()[name].name == "__init__.py"


def resolve(name: str) -> str | None:
    """The project module a dotted name refers to (its longest module prefix)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules():
            return candidate
        parts.pop()
    return None


def imported_names(importer: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The dotted names an import statement loads, made absolute."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = importer if is_package(importer) else importer.rpartition(".")[0]
        anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
        base = f"{anchor}.{base}" if base else anchor
    for alias in node.names:
        # ``from pkg import mod`` loads the module pkg.mod when there is one.
        submodule = f"{base}.{alias.name}"
        yield submodule if submodule in modules() else base


def imports_in(name: str, tree: ast.AST) -> Iterator[Import]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for dotted in imported_names(name, node):
                target = resolve(dotted)
                if target is not None and target != name:
                    yield Import(name, node.lineno, target)


@cache
def imports() -> tuple[Import, ...]:
    return tuple(
        edge
        for name, path in modules().items()
        for edge in imports_in(name, ast.parse(path.read_text(), filename=str(path)))
    )


def layer_of(name: str) -> int | None:
    if name in CONTAINERS:
        return -1
    for index, members in enumerate(LAYERS):
        if any(name == member or name.startswith(f"{member}.") for member in members):
            return index
    return None


def rank(name: str) -> int:
    layer = layer_of(name)
    if layer is None:
        raise AssertionError(f"{name} has no layer")
    return layer


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of ``graph`` (iterative: the graph has hundreds of nodes)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            child = next(successors, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


def cycle_through(start: str, graph: dict[str, set[str]], within: set[str]) -> list[str]:
    """A shortest path from ``start`` back to itself inside one component."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in sorted(graph[node] & within):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{start} is in a component but on no cycle")


def test_cycle_finder_names_a_three_module_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    components = [sorted(c) for c in strongly_connected(graph) if len(c) > 1]
    assert components == [["a", "b", "c"]]
    assert cycle_through("a", graph, {"a", "b", "c"}) == ["a", "b", "c", "a"]


def test_imports_at_every_level_count() -> None:
    source = """
from typing import TYPE_CHECKING
from . import clock
if TYPE_CHECKING:
    from bidder.serve.settings import Settings
def later():
    import pacing.node
    from ..openrtb import request
"""
    found = {edge.target for edge in imports_in("bidder.core.nobid", ast.parse(source))}
    assert found == {
        "bidder.core.clock",
        "bidder.serve.settings",
        "pacing.node",
        "bidder.openrtb.request",
    }


def test_every_module_has_a_layer() -> None:
    unplaced = [name for name in modules() if layer_of(name) is None]
    assert not unplaced, f"modules outside the layer table (add them to LAYERS): {unplaced}"


def test_no_import_cycles() -> None:
    graph: dict[str, set[str]] = {name: set() for name in modules()}
    lines: dict[tuple[str, str], int] = {}
    for edge in imports():
        graph[edge.importer].add(edge.target)
        lines.setdefault((edge.importer, edge.target), edge.line)
    cycles: list[str] = []
    for component in strongly_connected(graph):
        if len(component) > 1:
            cycle = cycle_through(min(component), graph, set(component))
            steps = [f"{a} (line {lines[a, b]})" for a, b in pairwise(cycle)]
            cycles.append(" -> ".join([*steps, cycle[-1]]))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_imports_point_down_the_layers() -> None:
    upward = [
        f"{edge.where()}: {edge.importer} (layer {layer_of(edge.importer)}) imports "
        f"{edge.target} (layer {layer_of(edge.target)})"
        for edge in imports()
        if rank(edge.importer) < rank(edge.target)
    ]
    assert not upward, "imports from a lower layer into a higher one:\n" + "\n".join(upward)


def test_no_import_of_another_packages_private_module() -> None:
    def reaches_in(edge: Import) -> bool:
        owner, _, leaf = edge.target.rpartition(".")
        private = leaf.startswith("_") and not leaf.startswith("__")
        return private and not (edge.importer == owner or edge.importer.startswith(f"{owner}."))

    offenders = [f"{edge.where()}: imports {edge.target}" for edge in imports() if reaches_in(edge)]
    assert not offenders, "private modules of another package:\n" + "\n".join(offenders)


def private_names_taken(name: str, tree: ast.AST) -> Iterator[str]:
    """``from module import _name`` where ``module`` is outside the importer's package."""
    package = name if is_package(name) else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or node.module is None:
            continue
        owner = resolve(node.module)
        if owner is None or owner == package or owner.startswith(f"{package}."):
            continue
        for alias in node.names:
            private = alias.name.startswith("_") and not alias.name.startswith("__")
            if private and f"{node.module}.{alias.name}" not in modules():
                yield f"{module_path(name)}:{node.lineno}: takes {node.module}.{alias.name}"


def test_private_names_stay_in_their_package() -> None:
    offenders = [
        found
        for name, path in modules().items()
        for found in private_names_taken(name, ast.parse(path.read_text(), filename=str(path)))
    ]
    assert not offenders, "private names of another package:\n" + "\n".join(offenders)


def test_a_private_name_taken_from_another_package_is_found() -> None:
    source = "from bidder.core.clock import _hidden\nfrom bidder.core.clock import SystemClock\n"
    found = list(private_names_taken("models.logs", ast.parse(source)))
    assert found == ["models/logs.py:1: takes bidder.core.clock._hidden"]


def sized_files() -> list[Path]:
    return [path for top in SIZED_DIRS for path in sorted((ROOT / top).rglob("*.py"))]


def test_modules_stay_small() -> None:
    too_long = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for path in sized_files()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(too_long)


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement of the body to the last (signature and decorators
    excluded)."""
    end = node.end_lineno if node.end_lineno is not None else node.body[-1].lineno
    return end - node.body[0].lineno + 1


def test_functions_stay_short() -> None:
    too_long: list[str] = []
    for path in sized_files():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if (lines := body_lines(node)) > MAX_FUNCTION_LINES:
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                too_long.append(f"{where}: {node.name} has {lines} body lines")
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(too_long)
