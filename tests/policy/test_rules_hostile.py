"""A policy rule that cannot match is never accepted silently: a deny rule that matches
nothing allows everything (``--deny destructive`` let ``files.delete_file`` run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from toolcat import Catalog, Policy, PolicyError
from toolcat.cli import cli


@pytest.mark.parametrize(
    ("rule", "reason"),
    [
        ("bogus rule", "' ' is in no tool name"),
        ("delete file", "' ' is in no tool name"),
        ("toolkit:Files", "'F' is in no toolkit name"),
        ("Files.delete_file", "'F' is in no toolkit name"),
        ("files.delete_file.x", "a tool id (toolkit.name) has one '.'"),
        ("files.delete file", "' ' is in no tool name"),
        ("[ /]*", "'[ /]' matches no character of a tool name"),
        ("délete", "'é' is in no tool name"),
        ("x" * 65, "at most 64 characters"),
        ("toolkit:" + "?" * 65, "at most 64 characters"),
    ],
)
def test_a_rule_no_tool_could_match_is_an_error(rule: str, reason: str) -> None:
    for side in ("deny", "allow"):
        with pytest.raises(PolicyError) as refused:
            Policy.of(**{side: [rule]})
        message = str(refused.value)
        assert f"policy rule {rule!r} cannot match any" in message
        assert reason in message and "\n" not in message


@pytest.mark.parametrize(
    "rule",
    ["destructive", "delete_file", "files.*", "*.delete_file", "tag:x y", "toolkit:f*", "[a-z]*"],
)
def test_rules_that_could_match_are_accepted(rule: str) -> None:
    Policy.of(deny=[rule])


@pytest.mark.parametrize(
    ("rule", "meant"),
    [
        ("destructive", "tag:destructive"),
        ("destruct*", "tag:destruct*"),
        ("files", "toolkit:files"),
    ],
)
def test_a_bare_name_meant_as_a_tag_or_toolkit_is_an_error(
    sample_catalog: Catalog, rule: str, meant: str
) -> None:
    with pytest.raises(PolicyError) as refused:
        sample_catalog.check_policy(Policy.of(deny=[rule]))
    message = str(refused.value)
    assert f"deny rule {rule!r} matches no tool name" in message
    assert repr(meant) in message and f"'*.{rule}'" in message and "\n" not in message


def test_a_rule_matching_no_tool_today_is_a_warning_naming_it(sample_catalog: Catalog) -> None:
    policy = Policy.of(
        deny=["tag:destructive", "no_such_tool", "toolkit:gone", "tag:nothing"],
        allow=["files.write_file", "math.nope"],
    )
    assert sample_catalog.check_policy(policy) == [
        "deny rule 'no_such_tool' matches no tool in this catalog",
        "deny rule 'toolkit:gone' matches no tool in this catalog",
        "deny rule 'tag:nothing' matches no tool in this catalog",
        "allow rule 'math.nope' matches no tool in this catalog",
    ]
    assert sample_catalog.check_policy(Policy.of(deny=["tag:destructive"])) == []


@pytest.fixture
def workspace(sample_catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "keep.txt").write_text("precious")
    monkeypatch.setenv("TOOLCAT_WORKSPACE", str(folder))
    return folder


def _cli(db: Path, *args: str) -> object:
    return CliRunner().invoke(cli, ["--db", str(db), *args])


def test_cli_deny_destructive_without_tag_refuses_to_run(
    sample_catalog: Catalog, workspace: Path
) -> None:
    """The reported case: the call does not run, and the error says what to write."""
    call = ["call", "files.delete_file", "--args", '{"path": "keep.txt"}']
    out = _cli(sample_catalog.path, "--isolate", "thread", "--deny", "destructive", *call)
    assert out.exit_code == PolicyError.exit_code, out.output  # type: ignore[attr-defined]
    assert "'tag:destructive'" in out.stderr  # type: ignore[attr-defined]
    assert (workspace / "keep.txt").read_text() == "precious"
    denied = _cli(sample_catalog.path, "--isolate", "thread", "--deny", "tag:destructive", *call)
    assert denied.exit_code == 12, denied.output  # type: ignore[attr-defined]
    assert (workspace / "keep.txt").read_text() == "precious"


def test_cli_bogus_rule_is_an_error(sample_catalog: Catalog) -> None:
    out = _cli(sample_catalog.path, "--deny", "bogus rule", "list")
    assert out.exit_code == PolicyError.exit_code  # type: ignore[attr-defined]
    assert out.stderr.startswith("error: policy rule 'bogus rule' cannot match")  # type: ignore[attr-defined]


def test_cli_warns_of_a_rule_matching_nothing(sample_catalog: Catalog) -> None:
    out = _cli(sample_catalog.path, "--deny", "no_such_tool", "list", "--json")
    assert out.exit_code == 0, out.output  # type: ignore[attr-defined]
    assert out.stderr == (  # type: ignore[attr-defined]
        "warning: deny rule 'no_such_tool' matches no tool in this catalog\n"
    )


def _serve(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``toolcat serve`` in a real process; a server that starts instead of refusing fails
    the test at the timeout instead of hanging it."""
    pytest.importorskip("mcp")
    command = [sys.executable, "-m", "toolcat", "--db", str(db), "serve", *args]
    try:
        return subprocess.run(
            command, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve started with {args}: it should have refused the rule")


def test_serve_refuses_a_rule_meant_as_a_tag(sample_catalog: Catalog) -> None:
    out = _serve(sample_catalog.path, "--http", "--port", "0", "--deny", "destructive")
    assert out.returncode == PolicyError.exit_code, out.stderr
    assert "serve deny rule 'destructive'" in out.stderr and "'tag:destructive'" in out.stderr


def test_tokens_file_rules_are_checked(sample_catalog: Catalog, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    principals = [{"name": "ops", "token": "t" * 32, "deny": ["destructive"]}]
    tokens.write_text(yaml.safe_dump({"principals": principals}))
    out = _serve(sample_catalog.path, "--http", "--port", "0", "--tokens", str(tokens))
    assert out.returncode == PolicyError.exit_code, out.stderr
    assert "principal 'ops': deny rule 'destructive'" in out.stderr
    principals[0]["deny"] = ["bogus rule"]
    tokens.write_text(yaml.safe_dump({"principals": principals}))
    out = _serve(sample_catalog.path, "--http", "--port", "0", "--tokens", str(tokens))
    assert out.returncode != 0
    assert "principal 'ops'" in out.stderr and "cannot match" in out.stderr
