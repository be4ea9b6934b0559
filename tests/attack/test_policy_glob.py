"""Policy rules whose Python matcher (calls, ``load``) and SQL ``GLOB`` (list, search) part
ways: a class that opens with a literal ``]`` followed by ``-``. SQLite reads ``[]-a]`` as the
three characters ``]``, ``-`` and ``a``; a range there would hide a tool that can still be
called, or refuse one that list and search still show."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog, Policy
from toolcat.policy import parse_rule

# Each starts with a literal "]" then "-": the rule engine must not read a range there.
PATTERNS = ["[]-a]", "[^]-a]", "[!]-a]", "[]-^a]", "[]-_-]", "x[]-z]y", "[]-a-c]"]
NAMES = ["]", "-", "a", "^", "_", "`", "b", "x_y", "x-y", "x]y"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_python_matcher_agrees_with_sqlite_glob(pattern: str) -> None:
    rule = parse_rule(f"tag:{pattern}")  # a tag may hold any character
    conn = sqlite3.connect(":memory:")
    for name in NAMES:
        sql = bool(conn.execute("SELECT ? GLOB ?", (name, rule.glob)).fetchone()[0])
        assert (rule.regex.fullmatch(name) is not None) is sql, (pattern, name)


@pytest.mark.parametrize("deny", ["files.delete[^]-a]file", "files.delete[]-a]file"])
def test_a_hidden_tool_is_refused_and_a_shown_one_is_not(tmp_path: Path, deny: str) -> None:
    with Catalog(tmp_path / "c.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    with Catalog(tmp_path / "c.db", policy=Policy.of(deny=[deny])) as catalog:
        listed = {t.id for t in catalog.list(include_deferred=True, limit=1000).tools}
        refused = catalog.call("files.delete_file", {"path": "nothing-here"}).error_code
        assert (refused == "TOOL_DENIED") is ("files.delete_file" not in listed)
