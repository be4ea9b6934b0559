from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from toolcat import Catalog, CatalogError
from toolcat.store.migrations import MIGRATIONS, SCHEMA_VERSION, schema_version


def test_new_catalog_is_migrated_to_the_latest_schema(db_path: Path) -> None:
    Catalog(db_path).close()
    conn = sqlite3.connect(db_path)
    assert schema_version(conn) == SCHEMA_VERSION == len(MIGRATIONS)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"meta", "toolkits", "tools", "tool_tags", "embeddings", "tools_fts"} <= tables
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reopening_does_not_migrate_again(db_path: Path) -> None:
    Catalog(db_path).close()
    conn = sqlite3.connect(db_path)
    before = conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
    conn.close()
    Catalog(db_path).close()
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == before


def test_catalog_from_a_newer_toolcat_is_refused(db_path: Path) -> None:
    Catalog(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE meta SET value = 999 WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(CatalogError, match="Upgrade toolcat"):
        Catalog(db_path)


def test_foreign_sqlite_file_and_garbage_file_are_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE people (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(CatalogError, match="not a toolcat catalog"):
        Catalog(other)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(CatalogError):
        Catalog(garbage)
