from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from tests.helpers import (
    ROOT,
    SAMPLE_TOOLKITS,
    run_script,
    table_snapshot,
    toolkit_data,
    write_manifest,
)
from toolcat.cli import cli

TOOL_KEYS = [
    "id",
    "name",
    "toolkit",
    "version",
    "description",
    "parameters",
    "tags",
    "defer_loading",
]


def run(db: Path, *args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == code, (result.output, result.stderr)
    return result


def run_json(db: Path, *args: str) -> Any:
    return json.loads(run(db, *args, "--json").stdout)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "cat.db"
    run(path, "register", str(SAMPLE_TOOLKITS))
    return path


def test_register_prints_each_toolkit(tmp_path: Path) -> None:
    out = run(tmp_path / "x.db", "register", str(SAMPLE_TOOLKITS)).stdout
    assert "added     files 1.0.0 (8 tools)" in out
    assert out.strip().endswith("revision 1")
    again = run_json(tmp_path / "x.db", "register", str(SAMPLE_TOOLKITS))
    assert {r["status"] for r in again["results"]} == {"unchanged"}


def test_list_json_shape_and_pagination(db: Path) -> None:
    first = run_json(db, "list", "--limit", "5")
    assert list(first) == ["revision", "tools", "next_cursor"]
    assert first["revision"] == 1
    assert all(list(t) == TOOL_KEYS for t in first["tools"])
    assert first["tools"][0]["id"] == f"{first['tools'][0]['toolkit']}.{first['tools'][0]['name']}"
    second = run_json(db, "list", "--limit", "5", "--cursor", first["next_cursor"])
    assert {t["id"] for t in first["tools"]}.isdisjoint(t["id"] for t in second["tools"])
    tagged = run_json(
        db, "list", "--tag", "filesystem", "--tag", "destructive", "--include-deferred"
    )
    assert {t["id"] for t in tagged["tools"]} == {
        "files.write_file",
        "files.move_file",
        "files.delete_file",
    }
    assert run_json(db, "list", "--toolkit", "time")["tools"][0]["toolkit"] == "time"


def test_search_json_shape(db: Path) -> None:
    out = run_json(db, "search", "delete a file", "-k", "3")
    assert list(out) == ["revision", "query", "mode", "no_match", "hits"]
    assert (out["query"], out["mode"], out["revision"]) == ("delete a file", "bm25", 1)
    assert [list(h) for h in out["hits"]] == [["rank", "score", "match", "tool"]] * 3
    assert out["hits"][0]["tool"]["id"] == "files.delete_file"
    assert out["hits"][0]["tool"]["defer_loading"] is True
    assert list(out["hits"][0]["tool"]) == TOOL_KEYS
    no_deferred = run_json(db, "search", "delete a file", "--no-deferred")
    assert all(not h["tool"]["defer_loading"] for h in no_deferred["hits"])
    filtered = run_json(db, "search", "convert", "--tag", "math", "--toolkit", "math")
    assert filtered["hits"][0]["tool"]["id"] == "math.convert_units"


def test_text_output(db: Path) -> None:
    assert "files.delete_file" in run(db, "search", "remove an old file").stdout
    listing = run(db, "list").stdout
    assert "files.read_file" in listing and "files.delete_file" not in listing
    shown = run(db, "show", "files.delete_file").stdout
    assert "deferred: yes" in shown and '"path"' in shown
    assert "1.0.0" in run(db, "versions", "files").stdout
    assert "files" in run(db, "toolkits").stdout
    assert run(db, "search", "zzzzqqq").stdout.strip() == "no matching tools"


def test_show_json_has_the_full_definition(db: Path) -> None:
    tool = run_json(db, "show", "read_file")
    assert tool["implementation"] == "toolcat.samples.files:read_file"
    assert tool["examples"] and tool["annotations"]["read_only"] is True
    assert all(k in tool for k in TOOL_KEYS)


def test_versions_deprecate_and_remove(db: Path, tmp_path: Path) -> None:
    write_manifest(tmp_path, toolkit_data(version="1.0.0"), name="w1")
    write_manifest(tmp_path, toolkit_data(version="2.0.0"), name="w2")
    run(db, "register", str(tmp_path / "w1.yaml"), str(tmp_path / "w2.yaml"))
    versions = run_json(db, "versions", "weather")["versions"]
    assert [(v["version"], v["active"]) for v in versions] == [("1.0.0", False), ("2.0.0", True)]
    assert "deprecated weather@2.0.0" in run(db, "deprecate", "weather@2.0.0").stdout
    assert run_json(db, "show", "weather.get_forecast")["version"] == "1.0.0"
    assert "removed weather@1.0.0" in run(db, "remove", "weather@1.0.0").stdout
    assert "removed weather (1 version)" in run(db, "remove", "weather").stdout


@pytest.mark.parametrize(
    ("args", "code", "pattern"),
    [
        (["show", "nope"], 4, r"^error: unknown tool 'nope'"),
        (["show", "read-file"], 4, r"Did you mean: files\.read_file"),
        (["versions", "nope"], 4, r"^error: no toolkit named 'nope'"),
        (["remove", "files@7"], 4, r"has no version '7'"),
        (["list", "--cursor", "bogus"], 7, r"invalid cursor"),
        (["list", "--limit", "0"], 7, r"limit must be"),
        (["search", "x", "-k", "0"], 7, r"k must be"),
        (["list", "--toolkit", "nosuch"], 4, r"no toolkit named 'nosuch'"),
        (["search", "x", "--toolkit", "fils"], 4, r"no toolkit named 'fils'. Did you mean: files"),
        (["export", "--format", "mcp", "--toolkit", "nosuch"], 4, r"no toolkit named"),
        (["check", "nosuch"], 4, r"no toolkit named 'nosuch'"),
        (["versions", "nosuch"], 4, r"no toolkit named 'nosuch'"),
        (["list", "--toolkit", "math@9.9"], 4, r"has no version '9.9'; registered: 1.0.0"),
    ],
)
def test_errors_are_one_line_with_exit_codes(
    db: Path, args: list[str], code: int, pattern: str
) -> None:
    result = run(db, *args, code=code)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(pattern, lines[0]), lines
    assert "Traceback" not in result.stderr


def test_bad_manifest_via_cli_changes_nothing(db: Path, tmp_path: Path) -> None:
    bad = toolkit_data()
    bad["tools"][0]["parameters"] = {"type": "array"}
    path = write_manifest(tmp_path, bad)
    before = table_snapshot(db)
    result = run(db, "register", str(path), code=3)
    assert result.stderr.strip() == (
        f"error: {path}: toolkit 'weather', tool 'get_forecast', field 'parameters': "
        "parameters must be a JSON Schema with type 'object'"
    )
    assert table_snapshot(db) == before


def test_version_conflict_via_cli(db: Path, tmp_path: Path) -> None:
    run(db, "register", str(write_manifest(tmp_path, toolkit_data())))
    changed = write_manifest(tmp_path, toolkit_data(description="changed"))
    assert "--replace" in run(db, "register", str(changed), code=6).stderr
    assert "replaced" in run(db, "register", str(changed), "--replace").stdout


def test_debug_shows_the_traceback(db: Path) -> None:
    result = CliRunner().invoke(cli, ["--db", str(db), "--debug", "show", "nope"])
    assert result.exit_code != 0
    assert result.exception is not None and type(result.exception).__name__ == "UnknownToolError"


def test_toolcat_db_environment_variable(tmp_path: Path) -> None:
    env_db = tmp_path / "env.db"
    result = CliRunner().invoke(cli, ["init"], env={"TOOLCAT_DB": str(env_db)})
    assert result.exit_code == 0 and result.stdout.strip() == str(env_db)
    assert env_db.exists()


def test_every_command_is_documented() -> None:
    docs = "".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None and command.help, name
        assert f"toolcat {name}" in docs, f"neither README nor docs/ mention `toolcat {name}`"


def test_every_command_is_found_where_the_group_looks() -> None:
    """The group imports a command's module on first use: its map of names to modules
    names every command of every module, in that module, and `--help` lists them all."""
    from toolcat.cli import admin, agent, console, operator
    from toolcat.cli.root import MODULE_COMMANDS

    modules = {"agent": agent, "admin": admin, "operator": operator, "console": console}
    assert {
        name: [command.name for command in module.COMMANDS] for name, module in modules.items()
    } == MODULE_COMMANDS
    shown = CliRunner().invoke(cli, ["--help"]).stdout.split("Commands:\n", 1)[1]
    listed = [line.split()[0] for line in shown.splitlines() if line.strip()]
    assert listed == sorted(name for names in MODULE_COMMANDS.values() for name in names)
    assert len(listed) == 21


@pytest.mark.parametrize(
    ("name", "args", "code", "error_code"),
    [
        ("convert_units", '{"value": 1, "from_unit": "km", "to_unit": "m"}', 0, None),
        ("nope", "{}", 4, "UNKNOWN_TOOL"),
        ("convert_units", '{"value": "x"}', 10, "INVALID_ARGUMENTS"),
        ("calculate", '{"expression": "1/0"}', 16, "TOOL_ERROR"),
        ("broken", "{}", 9, "IMPORT_FAILED"),
    ],
)
def test_call_prints_a_tool_result(
    db: Path, tmp_path: Path, name: str, args: str, code: int, error_code: str | None
) -> None:
    broken = toolkit_data(
        "broken",
        module="no.such",
        tools=[{"name": "broken", "description": "Broken.", "implementation": "no.such.module:f"}],
    )
    run(db, "register", str(write_manifest(tmp_path, broken)))
    out = json.loads(run(db, "call", name, "--args", args, "--json", code=code).stdout)
    assert list(out) == [
        "success",
        "data",
        "error",
        "error_code",
        "duration_ms",
        "truncated",
        "events",
    ]
    assert out["error_code"] == error_code
    assert out["success"] is (error_code is None)


def test_call_text_output_and_timeout(db: Path, tmp_path: Path) -> None:
    out = run(db, "call", "calculate", "--args", '{"expression": "6*7"}').stdout
    assert out.strip() == "42"
    run(db, "register", "--module", "tests.fixtures.tools")
    result = run(db, "call", "sleeps", "--args", '{"seconds": 3}', "--timeout", "0.1", code=11)
    assert "error (TIMEOUT)" in result.stderr
    assert "--args" in run(db, "call", "calculate", "--args", "{not json", code=2).stderr


def test_call_denied_by_policy(db: Path) -> None:
    policy = ["--deny", "tag:destructive", "--allow", "files.write_file"]
    result = CliRunner().invoke(
        cli, ["--db", str(db), *policy, "call", "delete_file", "--args", '{"path": "x"}', "--json"]
    )
    assert result.exit_code == 12
    assert json.loads(result.stdout)["error_code"] == "TOOL_DENIED"
    listed = CliRunner().invoke(cli, ["--db", str(db), *policy, "list", "--include-deferred"])
    assert "files.delete_file" not in listed.stdout and "files.write_file" in listed.stdout


def test_register_module_manifest_and_check(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    out = run(db, "register", "--module", "tests.fixtures.tools", "--version", "2.0").stdout
    assert "added     fixtures 2.0" in out
    manifest = tmp_path / "fixtures.yaml"
    run(db, "manifest", "--module", "tests.fixtures.tools", "-o", str(manifest))
    assert "implementation: tests.fixtures.tools:add" in manifest.read_text()
    as_json = run(db, "manifest", "--module", "tests.fixtures.tools", "--format", "json").stdout
    assert json.loads(as_json)["toolkit"] == "fixtures"
    report = run_json(db, "check")
    assert report["failed"] == 0 and len(report["tools"]) > 10
    assert "usage" in run(db, "register", code=2).stderr.lower()


def test_check_reports_broken_tools(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    tools = [
        {"name": "missing", "description": "Gone.", "implementation": "tests.fixtures.tools:gone"},
        {
            "name": "mismatch",
            "description": "Wrong args.",
            "implementation": "tests.fixtures.tools:add",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "z": {"type": "integer"}},
            },
        },
        {
            "name": "fine",
            "description": "Fine.",
            "implementation": "tests.fixtures.tools:add",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "required": ["a"],
            },
        },
    ]
    run(
        db,
        "register",
        str(write_manifest(tmp_path, toolkit_data("kit", module="tests.fixtures", tools=tools))),
    )
    result = run(db, "check", "kit", code=9)
    assert "FAIL kit.missing" in result.stdout and "has no attribute 'gone'" in result.stdout
    assert "FAIL kit.mismatch" in result.stdout
    assert "'z' but the function takes no such argument" in result.stdout
    assert "ok   kit.fine" in result.stdout
    assert "1 ok, 2 failed" in result.stdout


def test_counts_are_singular_for_one(tmp_path: Path) -> None:
    data = toolkit_data()
    data["tools"] = data["tools"][:1]
    result = run(tmp_path / "one.db", "register", str(write_manifest(tmp_path, data)))
    assert "(1 tool)" in result.stdout
    listed = run(tmp_path / "one.db", "list", "--include-deferred")
    assert "1 tool, revision 1" in listed.stdout


def test_status_before_any_reindex_says_so(db: Path) -> None:
    out = run(db, "status").stdout
    assert "dim None" not in out
    assert "not indexed yet: run `toolcat reindex`" in out


ONE_SHOT = """
import gc, json, os, sys
from toolcat import cli
before = "numpy" in sys.modules
sys.argv = ["toolcat", "--db", sys.argv[1], "search", "remove an old file", "--json"]
left = []
def leave(code):  # the process leaves at once after a search: seen here, not done
    left.append(code)
    raise SystemExit(code)
os._exit = leave
try:
    cli.main()
except SystemExit:
    pass
from toolcat.search import embeddings
print(json.dumps({"numpy_before": before, "blas": os.environ.get("OPENBLAS_NUM_THREADS"),
                  "frozen": gc.get_freeze_count(), "collecting": gc.isenabled(),
                  "one_shot": embeddings._one_shot, "models": "toolcat.models" in sys.modules,
                  "left": left, "telemetry": os.environ.get("ORT_DISABLE_TELEMETRY")}))
"""


@pytest.mark.parametrize("preset", [None, "3"])
def test_a_one_shot_search_process_limits_blas_threads_and_freezes_its_objects(
    db: Path, preset: str | None
) -> None:
    """The ``toolcat`` process of one search: OpenBLAS limited to one thread before numpy
    is imported (unless the user chose), no cycle collection during the search, what it
    built frozen after it, collection on again; it leaves at once when done."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    out = run_script(ONE_SHOT, str(db), env=env).stdout.splitlines()
    hits, state = json.loads("\n".join(out[:-1])), json.loads(out[-1])
    assert hits["hits"][0]["tool"]["id"] == "files.delete_file"
    assert state["numpy_before"] is False
    assert state["blas"] == (preset or "1")
    assert state["frozen"] > 1000
    assert state["collecting"] is True
    assert state["one_shot"] is True  # query encoding tuned for one search
    assert state["models"] is False  # plain data, no pydantic
    # It leaves without finalising the interpreter and onnxruntime, which do nothing a
    # search needs, and without onnxruntime's telemetry store.
    assert state["left"] == [0]
    assert state["telemetry"] == "1"


def test_searching_through_cli_main_leaves_the_process_as_it_was(db: Path) -> None:
    """A process that runs ``cli.main`` (a test, a tool runner) keeps encoding queries as a
    long-lived process does: one-shot tuning is for the ``toolcat`` process alone."""
    from toolcat.search import embeddings

    result = CliRunner().invoke(cli, ["--db", str(db), "search", "remove an old file"])
    assert result.exit_code == 0, result.output
    assert "files.delete_file" in result.output
    assert embeddings._one_shot is False
