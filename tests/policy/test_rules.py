"""One rule engine: what a rule hides from list and search it also refuses at call and load,
pinned versions are judged on their own definition, and a bad rule is a one-line error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog, Policy, PolicyError, ToolDeniedError
from toolcat.cli import cli
from toolcat.policy import parse_rule

RULES = [
    ["files.[^r]*"],
    ["files.[!r]*"],
    ["[a-d]*"],
    ["*_?ile"],
    ["tag:read-*"],
    ["toolkit:[ft]*"],
    ["math.calculate", "text.*"],
    ["*[]_]*"],  # a leading "]" in a class is a literal
]


@pytest.mark.parametrize("rules", RULES, ids=[" ".join(r) for r in RULES])
def test_what_a_rule_hides_it_refuses(sample_catalog: Catalog, rules: list[str]) -> None:
    policy = Policy.of(deny=rules)
    with Catalog(sample_catalog.path, policy=policy) as catalog:
        listed = {t.id for t in catalog.list(include_deferred=True, limit=1000).tools}
        every = catalog.list(include_deferred=True, include_denied=True, limit=1000).tools
        for tool in every:
            refused = catalog.call(tool.id, {}).error_code == "TOOL_DENIED"
            assert refused is (tool.id not in listed), tool.id
            if refused:
                with pytest.raises(ToolDeniedError):
                    catalog.load(tool.id)
    if rules == ["files.[^r]*"]:  # SQLite's negation, not fnmatch's "^ or r"
        assert {t for t in listed if t.startswith("files.")} == {"files.read_file"}


def test_sqlite_glob_and_python_agree_on_odd_patterns() -> None:
    import sqlite3

    names = ["a", "b", "r", "^", "!", "]", "-", "ab", "a]b", "a.b", "é", ""]
    patterns = ["[^r]", "[!r]", "[]]", "[]a]", "[a-c]", "?", "*", "a*", "[^]]*", "a[]]b", "[-]"]
    conn = sqlite3.connect(":memory:")
    for pattern in patterns:
        rule = parse_rule(f"tag:{pattern}")  # a tag may hold any of these characters
        for name in names:
            sql = conn.execute("SELECT ? GLOB ?", (name, rule.glob)).fetchone()[0]
            assert bool(sql) is (rule.regex.fullmatch(name) is not None), (pattern, name)


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("", "is empty"),
        (" tag:x", "surrounding spaces"),
        ("[abc", "'[' at position 1 is not closed"),
        ("tags:destructive", "unknown prefix 'tags:'"),
        ("tag:", "has nothing after 'tag:'"),
        ("[z-a]", "range z-a is reversed"),
    ],
)
def test_bad_rules_are_one_line_errors(rule: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message.replace("[", r"\[")) as caught:
        Policy.of(deny=[rule])
    assert "\n" not in str(caught.value)


def test_bad_rule_on_the_command_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "c.db"), "--deny", "[x", "list"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: policy rule '[x': '[' at position 1 is not closed"


@pytest.fixture
def two_versions(sample_catalog: Catalog, tmp_path: Path) -> Catalog:
    """files 0.9.0 (deprecated), whose delete_file has an extra tag, beside files 1.0.0."""
    data = yaml.safe_load((SAMPLE_TOOLKITS / "files.yaml").read_text())
    data["version"] = "0.9.0"
    for tool in data["tools"]:
        if tool["name"] == "delete_file":
            tool["tags"] = [*tool.get("tags", []), "legacy"]
    path = tmp_path / "files-0.9.0.yaml"
    path.write_text(yaml.safe_dump(data))
    sample_catalog.register(path)
    sample_catalog.deprecate("files@0.9.0")
    return sample_catalog


def test_pinned_versions_are_judged_on_their_own_definition(two_versions: Catalog) -> None:
    with Catalog(two_versions.path, policy=Policy.of(deny=["tag:destructive"])) as catalog:
        result = catalog.call("files.delete_file@0.9.0", {"path": "x"})
        assert result.error_code == "TOOL_DENIED"
        assert "version 0.9.0" in (result.error or "")
        with pytest.raises(ToolDeniedError):
            catalog.load("files.delete_file@0.9.0")
    with Catalog(two_versions.path, policy=Policy.of(deny=["tag:legacy"])) as catalog:
        assert catalog.call("files.delete_file@0.9.0", {"path": "x"}).error_code == "TOOL_DENIED"
        active = catalog.call("files.delete_file", {"path": "nothing-here"})
        assert active.error_code != "TOOL_DENIED"  # 1.0.0 has no legacy tag


def test_a_resolved_tool_runs_that_version(two_versions: Catalog) -> None:
    pinned = two_versions.get("files.delete_file@0.9.0")
    assert pinned.version == "0.9.0"
    with Catalog(two_versions.path, policy=Policy.of(deny=["tag:legacy"])) as catalog:
        assert catalog.call(pinned, {"path": "x"}).error_code == "TOOL_DENIED"
        assert catalog.call(catalog.get("files.delete_file"), {"path": "x"}).error_code != (
            "TOOL_DENIED"
        )
