"""The files and sqlite sample tools hold their sandbox: every attack from issue 9, each
called through the catalog as an agent would, on real files and real SQLite databases."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS, table_snapshot
from toolcat import Catalog


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "workspace"
    folder.mkdir()
    monkeypatch.setenv("TOOLCAT_WORKSPACE", str(folder))
    monkeypatch.delenv("TOOLCAT_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return folder


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("secret")
    (folder / "secret2.txt").write_text("secret")
    return folder


def ok(catalog: Catalog, name: str, **arguments: Any) -> Any:
    result = catalog.call(name, arguments)
    assert result.success, result.error
    return result.data


def refused(catalog: Catalog, name: str, *words: str, **arguments: Any) -> str:
    result = catalog.call(name, arguments)
    assert not result.success and result.error_code == "TOOL_ERROR", result
    message = result.error or ""
    assert "\n" not in message.strip()
    for word in words:
        assert word in message, message
    return message


@pytest.fixture
def in_workspace(workspace: Path) -> Iterator[Catalog]:
    """The sample catalog stored *inside* the workspace, as in the README's demo."""
    with Catalog(workspace / "catalog.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        yield catalog


def shop(catalog: Catalog) -> None:
    ok(catalog, "sqlite_execute", database="shop.db", sql="CREATE TABLE t (x)")
    ok(catalog, "sqlite_execute", database="shop.db", sql="INSERT INTO t VALUES (1)")


# -- the catalog file ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "database",
    [
        "%2e%2e/catalog.db",
        "sub/%2E%2E/%2e%2e/catalog.db",
        "catalog.db",
        "./catalog.db",
        "sub/../catalog.db",
        "catalog.db-wal",
        "catalog.db-shm",
        "catalog.db-journal",
    ],
)
def test_sqlite_tools_never_reach_the_catalog(
    in_workspace: Catalog, workspace: Path, database: str
) -> None:
    before = table_snapshot(workspace / "catalog.db")
    for tool, extra in [
        ("sqlite_tables", {}),
        ("sqlite_query", {"sql": "SELECT * FROM tools"}),
        ("sqlite_execute", {"sql": "UPDATE tools SET implementation = 'subprocess:getoutput'"}),
    ]:
        message = refused(in_workspace, tool, database=database, **extra)
        assert "catalog" in message or "percent-encoded" in message
    assert table_snapshot(workspace / "catalog.db") == before
    assert in_workspace.call("math.calculate", {"expression": "1+1"}).data == 2


def test_a_renamed_or_linked_catalog_is_still_refused(
    in_workspace: Catalog, workspace: Path
) -> None:
    copy = workspace / "innocent.sqlite"
    source = sqlite3.connect(workspace / "catalog.db")
    target = sqlite3.connect(copy)
    source.backup(target)
    source.close()
    target.close()
    refused(
        in_workspace,
        "sqlite_execute",
        "catalog",
        database="innocent.sqlite",
        sql="DELETE FROM tools",
    )
    (workspace / "link.db").symlink_to(workspace / "catalog.db")
    refused(in_workspace, "sqlite_query", "catalog", database="link.db", sql="SELECT 1")
    for tool, arguments in [
        ("write_file", {"path": "catalog.db", "content": "x"}),
        ("read_file", {"path": "catalog.db"}),
        ("delete_file", {"path": "catalog.db-wal"}),
        ("move_file", {"source": "catalog.db", "destination": "old.db"}),
        ("move_file", {"source": "innocent.sqlite", "destination": "x.db"}),
    ]:
        refused(in_workspace, tool, "catalog", **arguments)
    assert in_workspace.list()  # the catalog still answers


def test_the_configured_catalog_cannot_be_created_by_a_tool(
    sample_catalog: Catalog, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLCAT_DB", str(workspace / "future.db"))
    refused(
        sample_catalog,
        "sqlite_execute",
        "catalog",
        database="future.db",
        sql="CREATE TABLE tools (x)",
    )
    refused(sample_catalog, "write_file", "catalog", path="future.db", content="x")
    assert not (workspace / "future.db").exists()


# -- SQLite-level attacks --------------------------------------------------------------------


def test_read_tool_cannot_write_anywhere(
    sample_catalog: Catalog, workspace: Path, outside: Path
) -> None:
    shop(sample_catalog)
    before = (workspace / "shop.db").read_bytes()
    for sql, word in [
        (f"VACUUM INTO '{outside / 'copy.db'}'", "ATTACH"),
        ("VACUUM INTO 'inside.db'", "ATTACH"),
        ("VACUUM", "ATTACH"),
        (f"ATTACH DATABASE '{outside / 'new.db'}' AS x", "ATTACH"),
        ("ATTACH DATABASE 'inside.db' AS x", "ATTACH"),
        ("DETACH DATABASE main", "DETACH"),
        ("PRAGMA user_version = 7", "PRAGMA"),
        ("PRAGMA journal_mode = DELETE", "PRAGMA"),
        ("PRAGMA wal_checkpoint", "PRAGMA"),
        ("SELECT load_extension('/tmp/x.so')", "load_extension"),
        ("CREATE TEMP TABLE t2 (x)", "read-only"),
        ("DELETE FROM t", "read-only"),
        ("INSERT INTO t VALUES (2)", "read-only"),
    ]:
        refused(sample_catalog, "sqlite_query", "refused", word, database="shop.db", sql=sql)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt", "secret2.txt"]
    assert sorted(p.name for p in workspace.iterdir()) == ["shop.db"]
    assert (workspace / "shop.db").read_bytes() == before
    # what the read tool is for still works, informational pragmas included
    assert ok(sample_catalog, "sqlite_query", database="shop.db", sql="SELECT x FROM t")[
        "rows"
    ] == [{"x": 1}]
    assert ok(sample_catalog, "sqlite_query", database="shop.db", sql="PRAGMA table_info(t)")[
        "rows"
    ]
    assert ok(sample_catalog, "sqlite_query", database="shop.db", sql="PRAGMA user_version")[
        "rows"
    ] == [{"user_version": 0}]


def test_write_tool_cannot_leave_its_database(
    sample_catalog: Catalog, workspace: Path, outside: Path
) -> None:
    shop(sample_catalog)
    for sql, word in [
        (f"VACUUM INTO '{outside / 'copy.db'}'", "ATTACH"),
        (f"ATTACH DATABASE '{outside / 'new.db'}' AS x", "ATTACH"),
        ("PRAGMA writable_schema = ON", "PRAGMA"),
        ("SELECT load_extension('x')", "load_extension"),
    ]:
        refused(sample_catalog, "sqlite_execute", "refused", word, database="shop.db", sql=sql)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt", "secret2.txt"]
    ok(sample_catalog, "sqlite_execute", database="shop.db", sql="UPDATE t SET x = 2")


@pytest.mark.parametrize(
    "name", ["a#b.db", "a?mode=rwc.db", "x.db#", "x.db?mode=rwc", "sp ace%41.db"]
)
def test_uri_characters_are_only_file_names(
    sample_catalog: Catalog, workspace: Path, name: str
) -> None:
    ok(sample_catalog, "sqlite_execute", database=name, sql="CREATE TABLE t (x)")
    assert (workspace / name).is_file()  # the name as written, nothing dropped or decoded
    refused(
        sample_catalog, "sqlite_query", "read-only", database=name, sql="INSERT INTO t VALUES (1)"
    )
    assert ok(sample_catalog, "sqlite_tables", database=name) == [
        {"name": "t", "type": "table", "rows": 0}
    ]


def test_read_tool_does_not_create_databases(sample_catalog: Catalog, workspace: Path) -> None:
    refused(sample_catalog, "sqlite_query", "no database", database="new.db#", sql="SELECT 1")
    assert list(workspace.iterdir()) == []


# -- paths and globs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "../outside/secret.txt",
        "%2e%2e/outside/secret.txt",
        "..%2fsecret.txt",
        "a\x00b",
        "/etc/passwd",
        "link/secret.txt",
    ],
)
def test_paths_outside_are_refused(
    sample_catalog: Catalog, workspace: Path, outside: Path, path: str
) -> None:
    (workspace / "link").symlink_to(outside)
    result = sample_catalog.call("read_file", {"path": path})
    assert result.error_code == "TOOL_ERROR"
    assert any(
        w in (result.error or "") for w in ("outside the workspace", "percent-encoded", "NUL")
    )


def test_absolute_paths_inside_are_fine(sample_catalog: Catalog, workspace: Path) -> None:
    (workspace / "a.txt").write_text("hi")
    assert ok(sample_catalog, "read_file", path=str(workspace / "a.txt")) == "hi"


def test_symlink_loops_are_refused(sample_catalog: Catalog, workspace: Path) -> None:
    (workspace / "loop").symlink_to(workspace / "loop")
    result = sample_catalog.call("read_file", {"path": "loop"})
    assert result.error_code == "TOOL_ERROR"


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("list_dir", {"pattern": "../../../outside/*"}),
        ("list_dir", {"path": "sub", "pattern": "../*"}),
        ("list_dir", {"pattern": "/tmp/*"}),
        ("find_files", {"pattern": "../../../outside/secret*"}),
        ("find_files", {"pattern": "**/../../outside/*"}),
        ("find_files", {"pattern": "%2e%2e/*"}),
    ],
)
def test_glob_patterns_cannot_leave(
    sample_catalog: Catalog, workspace: Path, outside: Path, tool: str, arguments: dict[str, Any]
) -> None:
    (workspace / "sub").mkdir()
    refused(sample_catalog, tool, "pattern", **arguments)


def test_glob_results_are_checked_one_by_one(
    sample_catalog: Catalog, workspace: Path, outside: Path
) -> None:
    (workspace / "notes.txt").write_text("mine")
    (workspace / "link").symlink_to(outside)
    (workspace / "secret_link.txt").symlink_to(outside / "secret.txt")
    assert [e["name"] for e in ok(sample_catalog, "list_dir", pattern="*")] == ["notes.txt"]
    assert ok(sample_catalog, "list_dir", pattern="link/*") == []
    assert ok(sample_catalog, "find_files", pattern="*.txt") == ["notes.txt"]
    assert ok(sample_catalog, "find_files", pattern="secret*") == []
    assert ok(sample_catalog, "find_files", pattern="*", path=".") == ["notes.txt"]


def test_a_folder_holding_a_catalog_cannot_move(sample_catalog: Catalog, workspace: Path) -> None:
    (workspace / "kept").mkdir()
    with Catalog(workspace / "kept" / "catalog.db") as other:
        other.register(SAMPLE_TOOLKITS / "math.yaml")
    refused(
        sample_catalog, "move_file", "holds a toolcat catalog", source="kept", destination="moved"
    )
    assert (workspace / "kept" / "catalog.db").is_file()
    (workspace / "plain").mkdir()
    (workspace / "plain" / "a.txt").write_text("a")
    assert ok(sample_catalog, "move_file", source="plain", destination="moved") == "moved"
