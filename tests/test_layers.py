"""The package's imports point down and go round no circle (docs/layout.md draws the same list).

Every import counts, inside functions too; only imports under ``if TYPE_CHECKING:`` may point
anywhere (they never run). A module may import from its own package or from a layer below.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

# Top to bottom; packages on one line are siblings and may not import each other.
# `toolcat/__init__`, `__main__` and `samples` sit above all of them.
LAYERS = [
    "cli",
    "server | quality",
    "catalog",
    "registry | export",
    "remote | search",
    "runtime | store",
    "text",
    "policy",
    "models",
    "definitions | files",
    "errors",
]
ABOVE_ALL = {"toolcat", "toolcat.__main__", "samples"}
LEVEL = {name.strip(): depth for depth, line in enumerate(LAYERS) for name in line.split("|")}


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "toolcat").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def run_time_imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif type_checking(child):
            yield from (n for body in child.orelse for n in run_time_imports_of(body))
        else:
            yield from run_time_imports(child)


def run_time_imports_of(node: ast.stmt) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from run_time_imports(node)


def edges(known: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {imported toolcat module: line}."""
    graph: dict[str, dict[str, int]] = {}
    for module, path in known.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        out = graph.setdefault(module, {})
        for node in run_time_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    name = ".".join(base + ([node.module] if node.module else []))
                else:
                    name = node.module or ""
                targets = [
                    f"{name}.{alias.name}" if f"{name}.{alias.name}" in known else name
                    for alias in node.names
                ]
            for target in targets:
                if target.split(".")[0] == "toolcat" and target != module:
                    out.setdefault(target, node.lineno)
    return graph


def layer(module: str) -> str:
    parts = module.split(".")
    return "toolcat" if len(parts) == 1 else parts[1]


def test_every_package_has_a_layer() -> None:
    tops = {layer(m) for m in modules()} - ABOVE_ALL - {"__main__"}
    assert sorted(tops - set(LEVEL)) == [], "add the package to LAYERS (and docs/layout.md)"


def test_imports_point_down() -> None:
    known = modules()
    wrong = []
    for module, targets in sorted(edges(known).items()):
        mine = layer(module)
        if mine in ABOVE_ALL or module in ABOVE_ALL:
            continue
        for target, line in sorted(targets.items()):
            theirs = layer(target)
            if theirs == mine:
                continue
            if theirs in ABOVE_ALL or target in ABOVE_ALL or LEVEL[theirs] <= LEVEL[mine]:
                where = "sideways to" if LEVEL.get(theirs) == LEVEL[mine] else "up to"
                wrong.append(
                    f"{known[module].relative_to(SRC)}:{line}: {module} imports {target} "
                    f"({mine} may not reach {where} {theirs})"
                )
    assert wrong == [], "imports that break the layering:\n" + "\n".join(wrong)


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle() -> None:
    graph = edges(modules())
    described = []
    for component in circles(graph):
        members = set(component)
        links = [
            f"{a} -> {b} (line {line})"
            for a in component
            for b, line in sorted(graph[a].items())
            if b in members
        ]
        described.append(" | ".join(links))
    assert described == [], "import circles:\n" + "\n".join(described)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ..search import bm25\n", ["toolcat.search.bm25"]),
        ("def f():\n    from ..search.bm25 import X\n", ["toolcat.search.bm25"]),
        ("import typing\nif typing.TYPE_CHECKING:\n    from ..search import bm25\n", []),
    ],
    ids=["module level", "inside a function", "type checking only"],
)
def test_the_walk_sees_what_runs(tmp_path: Path, source: str, expected: list[str]) -> None:
    known = {"toolcat.store.x": tmp_path / "x.py", "toolcat.search.bm25": tmp_path / "bm25.py"}
    known["toolcat.store.x"].write_text(source)
    known["toolcat.search.bm25"].write_text("")
    assert list(edges(known)["toolcat.store.x"]) == expected
