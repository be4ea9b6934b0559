"""``toolcat/__init__.py`` names each public name three times, each for a reader of its own:
the ``TYPE_CHECKING`` imports (type checkers), ``_MODULES`` (the imports on first use, PEP
562) and a literal ``__all__`` (what mypy's strict mode counts as exported). The three agree,
and every name resolves."""

from __future__ import annotations

import ast
from pathlib import Path

import toolcat


def _type_checking_imports() -> dict[str, str]:
    """name -> ``.module`` of the imports under ``if TYPE_CHECKING:``."""
    tree = ast.parse(Path(toolcat.__file__).read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    return {
        alias.name: "." * node.level + (node.module or "")
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_the_three_lists_agree() -> None:
    modules = toolcat._MODULES  # type: ignore[attr-defined]
    assert _type_checking_imports() == modules
    assert sorted(toolcat.__all__) == sorted([*modules, "__version__"])


def test_every_public_name_resolves() -> None:
    for name in toolcat.__all__:
        assert getattr(toolcat, name) is not None, name
    assert set(toolcat.__all__) <= set(dir(toolcat))
