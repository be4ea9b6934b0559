from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, run_script, toolkit_data
from toolcat import Catalog, Policy, RegisteredTool, Toolkit
from toolcat.registry.python import toolkit_from_module


@pytest.fixture
def fixtures(catalog: Catalog) -> Catalog:
    catalog.register(toolkit_from_module("tests.fixtures.tools"))
    return catalog


def test_call_fills_defaults_and_returns_data(fixtures: Catalog) -> None:
    result = fixtures.call("add", {"a": 1})
    assert (result.success, result.data, result.error, result.error_code) == (True, 3, None, None)
    assert result.duration_ms >= 0 and result.truncated is False
    assert fixtures.call("fixtures.add", {"a": 1, "b": 5}).data == 6
    assert fixtures.call("fixtures.add@1.0.0", {"a": 1, "b": 1}).data == 2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"a": "one"}, "argument 'a' must be integer"),
        ({}, "required: a"),
        ({"a": 1, "c": 3}, "unknown argument 'c'; this tool takes: a, b"),
        ([1, 2], "arguments must be a JSON object"),
    ],
    ids=["wrong-type", "missing", "unknown-extra", "not-an-object"],
)
def test_invalid_arguments(fixtures: Catalog, arguments: Any, message: str) -> None:
    result = fixtures.call("add", arguments)
    assert result.error_code == "INVALID_ARGUMENTS"
    assert message in (result.error or "")


def test_schema_constraints_are_enforced(sample_catalog: Catalog) -> None:
    result = sample_catalog.call("prime_factors", {"n": 0})
    assert result.error_code == "INVALID_ARGUMENTS"
    assert "'n'" in (result.error or "") and "0" in (result.error or "")


def test_unknown_tool_suggests(fixtures: Catalog) -> None:
    result = fixtures.call("ad", {})
    assert result.error_code == "UNKNOWN_TOOL"
    result = fixtures.call("asyncadd", {})
    assert result.error_code == "UNKNOWN_TOOL"
    assert "fixtures.async_add" in (result.error or "")


def test_tool_errors_are_results(fixtures: Catalog) -> None:
    result = fixtures.call("fails", {"message": "bad input"})
    assert (result.success, result.error_code, result.error) == (
        False,
        "TOOL_ERROR",
        "ValueError: bad input",
    )
    assert fixtures.call("exits").error_code == "TOOL_ERROR"
    result = fixtures.call("unserialisable")
    assert result.error_code == "TOOL_ERROR" and "no JSON form" in (result.error or "")


def test_results_are_converted_to_json(fixtures: Catalog) -> None:
    data = fixtures.call("converted").data
    assert data == {
        "when": "2026-01-02T03:04:05",
        "day": "2026-01-02",
        "path": "/tmp/x",
        "set": [1, 2, 3],
        "tuple": [1, 2],
        "point": {"x": 1.0, "y": 2.0},
        "box": {"name": "b", "size": 3},
        "colour": "red",
        "bytes": "abc",
    }
    json.dumps(data)


def test_huge_results_are_truncated(fixtures: Catalog) -> None:
    result = fixtures.call("huge", {"megabytes": 50})
    assert result.success and result.truncated
    assert len(result.data.encode()) <= fixtures.max_result_bytes


def test_timeouts_sync_and_async(fixtures: Catalog) -> None:
    result = fixtures.call("sleeps", {"seconds": 5}, timeout=0.2)
    assert result.error_code == "TIMEOUT" and "0.2 s" in (result.error or "")
    assert result.duration_ms < 2000
    result = fixtures.call("async_sleeps", {"seconds": 5}, timeout=0.2)
    assert result.error_code == "TIMEOUT"
    assert fixtures.call("async_add", {"a": 2, "b": 3}).data == 5


def test_pydantic_model_tool(fixtures: Catalog) -> None:
    assert fixtures.call("Greeting", {"name": "Ada"}).data == "Hello, Ada!"
    assert fixtures.call("Greeting", {"name": "Ada", "shout": True}).data == "HELLO, ADA!"


def test_max_concurrency_is_respected(fixtures: Catalog) -> None:
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(fixtures.call("limited", {"seconds": 0.2})))
        for _ in range(5)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.success for r in results), results
    assert max(r.data for r in results) == 2


def test_acall(fixtures: Catalog) -> None:
    result = asyncio.run(fixtures.acall("add", {"a": 40}))
    assert result.data == 42


@pytest.mark.parametrize(
    ("implementation", "message"),
    [
        ("tests.fixtures.broken_import:anything", "RuntimeError: this module is broken on purpose"),
        ("tests.fixtures.tools:missing", "has no attribute 'missing'"),
        ("tests.fixtures.tools:NOT_CALLABLE", "is a int, not something callable"),
        ("tests.fixtures.nowhere:f", "ModuleNotFoundError"),
        (None, "has no implementation"),
    ],
    ids=["raises-on-import", "no-attribute", "not-callable", "no-module", "none"],
)
def test_import_failures(catalog: Catalog, implementation: str | None, message: str) -> None:
    tool: dict[str, Any] = {"name": "broken", "description": "A broken tool."}
    if implementation:
        tool["implementation"] = implementation
    catalog.register(
        Toolkit.model_validate(toolkit_data("bad", module="tests.fixtures", tools=[tool]))
    )
    result = catalog.call("broken")
    assert result.error_code == "IMPORT_FAILED"
    assert message in (result.error or "")


def test_policy_rules_deny_and_hide(sample_catalog: Catalog) -> None:
    policy = Policy.of(deny=["tag:destructive"], allow=["files.write_file"])
    with Catalog(sample_catalog.path, policy=policy) as catalog:
        result = catalog.call("delete_file", {"path": "x"})
        assert result.error_code == "TOOL_DENIED"
        assert "tag:destructive" in (result.error or "")
        listed = {t.id for t in catalog.list(include_deferred=True, limit=1000).tools}
        assert "files.delete_file" not in listed and "files.write_file" in listed
        assert "files.delete_file" not in {h.tool.id for h in catalog.search("delete file").hits}
        shown = catalog.search("delete file", include_denied=True).hits
        assert shown[0].tool.id == "files.delete_file"
        everything = catalog.list(include_deferred=True, include_denied=True, limit=1000).tools
        # SQL (list, search) and Python (call) read the rules the same way:
        for tool in everything:
            assert (tool.id in listed) == (policy.denying_rule(tool) is None), tool.id


@pytest.mark.parametrize(
    "rules",
    [["toolkit:files"], ["files.*"], ["*_file"], ["tag:read-*"], ["math.calculate", "text.*"]],
)
def test_rule_forms(sample_catalog: Catalog, rules: list[str]) -> None:
    policy = Policy.of(deny=rules)
    with Catalog(sample_catalog.path, policy=policy) as catalog:
        listed = {t.id for t in catalog.list(include_deferred=True, limit=1000).tools}
        every = catalog.list(include_deferred=True, include_denied=True, limit=1000).tools
        denied = {t.id for t in every if policy.denying_rule(t)}
        assert denied and listed == {t.id for t in every} - denied


def test_guards_can_veto(fixtures: Catalog) -> None:
    def no_big_numbers(tool: RegisteredTool, arguments: dict[str, Any]) -> str | None:
        return "a is too big" if arguments.get("a", 0) > 100 else None

    def broken(tool: RegisteredTool, arguments: dict[str, Any]) -> bool:
        raise RuntimeError("guard bug")

    with Catalog(fixtures.path, policy=Policy.of(guards=[no_big_numbers])) as catalog:
        assert catalog.call("add", {"a": 1}).success
        result = catalog.call("add", {"a": 1000})
        assert result.error_code == "TOOL_DENIED" and "a is too big" in (result.error or "")
    with Catalog(fixtures.path, policy=Policy.of(guards=[broken])) as catalog:
        result = catalog.call("add", {"a": 1})
        assert result.error_code == "TOOL_DENIED" and "guard bug" in (result.error or "")


LAZY_SCRIPT = """
import os, sys, json
from toolcat import Catalog
catalog = Catalog(sys.argv[1])
MARK = os.environ["TOOLCAT_FIXTURE_MARK"]
marks = lambda: open(MARK).read().count("imported") if os.path.exists(MARK) else 0
catalog.list(include_deferred=True)
catalog.search("add two numbers")
catalog.get("fixtures.add")
before = marks()
loaded_before = "tests.fixtures.tools" in sys.modules
first = catalog.call("add", {"a": 1}).data
after_first = marks()
second = catalog.call("add", {"a": 2}).data
print(json.dumps([before, loaded_before, first, after_first, second, marks()]))
"""


def test_implementations_are_imported_on_first_call_only(tmp_path: Path) -> None:
    db = tmp_path / "lazy.db"
    manifest = tmp_path / "fixtures.yaml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "toolcat",
            "manifest",
            "--module",
            "tests.fixtures.tools",
            "-o",
            str(manifest),
        ],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    with Catalog(db) as catalog:
        catalog.register(manifest)
    mark = tmp_path / "mark.txt"
    env = {**os.environ, "TOOLCAT_FIXTURE_MARK": str(mark)}
    out = run_script(LAZY_SCRIPT, str(db), env=env).stdout
    before, loaded_before, first, after_first, second, final = json.loads(out)
    assert (before, loaded_before) == (0, False)
    assert (first, after_first, second, final) == (3, 1, 4, 1)
