"""A catalog edited or damaged by hand: every read and write either works or says, in one
``CatalogDamagedError`` naming the file, what is wrong; never another exception."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS, toolkit_data
from toolcat import Catalog, CatalogDamagedError, CatalogError, ToolcatError, Toolkit
from toolcat.store.migrations import SCHEMA_OBJECTS

BAD_VALUES = ["x", None, 7, 1.5, b"\x00\xff", "{", "[]", "{}", '{"a": 1}', '["a", 1]']

# Every column the readers touch, per table (rowid-bearing tables: one row is damaged).
COLUMNS = {
    "toolkits": [
        "name",
        "version",
        "description",
        "tags",
        "module",
        "deprecated",
        "active",
        "source",
        "registered_at",
        "content_hash",
    ],
    "tools": ["toolkit", "name", "defer_loading", "tags", "definition", "content_hash"],
    "tool_tags": ["tag"],
}
META_KEYS = ["schema_version", "revision", "learn_from_use", "usage_revision"]
DEFINITION_FIELDS = [
    "name",
    "description",
    "parameters",
    "output_schema",
    "tags",
    "defer_loading",
    "idempotent",
    "streaming",
    "annotations",
    "implementation",
    "examples",
    "search_hint",
    "timeout",
    "max_concurrency",
    "max_result_bytes",
]
DEFINITION_VALUES = ['"x"', "7", "[1]", '{"a": 1}', "true", "null"]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("pristine") / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        catalog.record_use("read the notes file", "files.read_file")
    return db


def damaged_copy(pristine: Path, folder: Path, *statements: tuple[str, tuple[Any, ...]]) -> Path:
    db = folder / "damaged.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copy(pristine, db)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = OFF")
        for sql, params in statements:
            conn.execute(sql, params)
    except sqlite3.IntegrityError:  # NOT NULL, UNIQUE: no hand edit gets past these either
        pytest.skip("the schema refuses this edit")
    finally:
        conn.close()
    return db


OPERATIONS: dict[str, Callable[[Catalog], Any]] = {
    "list": lambda c: c.list(include_deferred=True, limit=1000),
    "list_summaries": lambda c: c.list_summaries(include_deferred=True, limit=1000),
    "search_bm25": lambda c: c.search("read a file", mode="bm25"),
    "search_summaries": lambda c: c.search_summaries("delete the file", mode="bm25"),
    "search_regex": lambda c: c.search("read", mode="regex"),
    "get": lambda c: c.get("files.read_file"),
    "toolkits": lambda c: c.toolkits(),
    "versions": lambda c: c.versions("files"),
    "status": lambda c: c.status(),
    "export": lambda c: c.export(list(c.iter_tools()), "openai-chat"),
    "register": lambda c: c.register(Toolkit.model_validate(toolkit_data("files", "9.0.0"))),
    "register_replace": lambda c: c.register(
        Toolkit.model_validate(toolkit_data("files", "9.0.0")), replace=True
    ),
    "deprecate": lambda c: c.deprecate("math@1.0.0"),
    "remove": lambda c: c.remove("text"),
    "usage": lambda c: c.usage(),
}


def run_everything(db: Path) -> list[str]:
    """Each operation on a fresh Catalog of ``db``; what went wrong other than a clean
    ``ToolcatError`` (a damaged catalog must be a CatalogDamagedError naming the file)."""
    wrong = []
    for name, operation in OPERATIONS.items():
        try:
            with Catalog(db) as catalog:
                operation(catalog)
        except CatalogDamagedError as e:
            if str(db) not in str(e) or "\n" in str(e):
                wrong.append(f"{name}: {e}")
        except ToolcatError:
            pass  # a name edited away is unknown now: a clean error of its own
        except Exception as e:
            wrong.append(f"{name}: {type(e).__name__}: {e}")
    return wrong


@pytest.mark.parametrize("value", BAD_VALUES, ids=repr)
@pytest.mark.parametrize(
    "column", [f"{t}.{c}" for t, cols in COLUMNS.items() for c in cols], ids=str
)
def test_a_damaged_column(pristine: Path, tmp_path: Path, column: str, value: Any) -> None:
    table, name = column.split(".")
    db = damaged_copy(pristine, tmp_path, (f"UPDATE {table} SET {name} = ?", (value,)))
    assert run_everything(db) == []


@pytest.mark.parametrize("value", [*BAD_VALUES, "delete"], ids=repr)
@pytest.mark.parametrize("key", META_KEYS)
def test_a_damaged_meta_value(pristine: Path, tmp_path: Path, key: str, value: Any) -> None:
    statement = (
        ("DELETE FROM meta WHERE key = ?", (key,))
        if value == "delete"
        else ("UPDATE meta SET value = ? WHERE key = ?", (value, key))
    )
    db = damaged_copy(pristine, tmp_path, statement)
    assert run_everything(db) == []
    if value != 7:  # a whole number is a value like any other (7: a newer schema)
        with pytest.raises(CatalogDamagedError, match=key):
            Catalog(db).close()


@pytest.mark.parametrize("value", [*DEFINITION_VALUES, "remove"])
@pytest.mark.parametrize("field", DEFINITION_FIELDS)
def test_a_damaged_definition_field(pristine: Path, tmp_path: Path, field: str, value: str) -> None:
    edit = (
        ("UPDATE tools SET definition = json_remove(definition, ?)", (f"$.{field}",))
        if value == "remove"
        else (
            "UPDATE tools SET definition = json_set(definition, ?, json(?))",
            (f"$.{field}", value),
        )
    )
    db = damaged_copy(pristine, tmp_path, edit)
    assert run_everything(db) == []


@pytest.mark.parametrize("name", sorted(SCHEMA_OBJECTS))
def test_a_dropped_table(pristine: Path, tmp_path: Path, name: str) -> None:
    conn = sqlite3.connect(pristine)
    kind = conn.execute("SELECT type FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
    conn.close()
    db = damaged_copy(pristine, tmp_path, (f"DROP {kind.upper()} {name}", ()))
    with pytest.raises(CatalogDamagedError, match=name) as err:
        Catalog(db).close()
    assert str(db) in str(err.value)


def test_the_schema_objects_are_what_a_catalog_holds(tmp_path: Path) -> None:
    Catalog(tmp_path / "fresh.db").close()
    conn = sqlite3.connect(tmp_path / "fresh.db")
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type != 'index'")}
    conn.close()
    assert names == SCHEMA_OBJECTS


def test_a_toolkit_version_that_is_no_version(pristine: Path, tmp_path: Path) -> None:
    db = damaged_copy(pristine, tmp_path, ("UPDATE toolkits SET version = 'not a version!'", ()))
    with Catalog(db) as catalog, pytest.raises(CatalogDamagedError) as err:
        catalog.register(Toolkit.model_validate(toolkit_data("files", "9.0.0")), replace=True)
    assert "'not a version!' is not a version" in str(err.value)


def toolcat(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("UPDATE meta SET value = 'abc' WHERE key = 'schema_version'", "schema_version"),
        ("DELETE FROM meta WHERE key = 'revision'", "'revision' is missing"),
        ("UPDATE tools SET definition = '{not json'", "is not JSON"),
        ("UPDATE tools SET definition = json_remove(definition, '$.parameters')", "parameters"),
        ("UPDATE tools SET tags = 'nope'", "tags are not a JSON list"),
        ("DROP TABLE tools_fts", "tools_fts"),
    ],
    ids=["schema_version", "revision", "definition", "field", "tags", "fts"],
)
@pytest.mark.parametrize(
    "args", [("list",), ("search", "read a file"), ("show", "files.read_file")], ids=str
)
def test_the_cli_says_damaged_in_one_line(
    pristine: Path, tmp_path: Path, sql: str, words: str, args: tuple[str, ...]
) -> None:
    db = damaged_copy(pristine, tmp_path, (sql, ()))
    result = toolcat(db, *args)
    assert result.returncode == CatalogError.exit_code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert f"catalog '{db}' is damaged" in lines[0] and words in lines[0], lines[0]
